"""A process that holds a known amount of GPU memory, for the GPU benchmarks (gpu_check,
gpu_placement_check): the one GPU allocation they both run.

    python benchmarks/harness/gpu_holder.py BYTES [--port PORT] [--fake | --dry]

It allocates BYTES on the first GPU CUDA_VISIBLE_DEVICES gives it, with torch, else CuPy, else the
CUDA driver API through ctypes (libcuda ships with the driver, so no CUDA toolkit is needed), and
prints one line `allocated BYTES bytes with HOW on DEVICES`. Then, with --port, it answers GET
with 200 `ok` on 127.0.0.1:PORT (a model's health check) until it is stopped; without, it sleeps
until SIGTERM (exit 0).

No GPU here: `--fake` declares BYTES to the fake NVML backend instead (the file
`$SWAPD_FAKE_GPU_MEM_DIR/<pid>`, see daemon/machinery/gpu_fake.py); `--dry` allocates nothing
(the fake backend then reads `$SWAPD_FAKE_GPU_MEM` from this process's environment).
"""

from __future__ import annotations

import argparse
import ctypes
import http.server
import os
import signal
import sys
import time
from typing import Any


def allocate(size: int) -> tuple[str, Any]:
    """What allocated, and the object that keeps the memory held while it lives."""
    try:
        import torch  # type: ignore[import-not-found]

        buf = torch.empty(size, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        return "torch", buf
    except Exception:
        pass
    try:
        import cupy  # type: ignore[import-not-found]

        return "cupy", cupy.empty(size, dtype=cupy.uint8)
    except Exception:
        pass
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(ret: int, what: str) -> None:
        if ret != 0:
            sys.exit(f"{what} failed: CUresult {ret}")

    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)), "cuMemAlloc")
    return "libcuda (driver API via ctypes)", (ctx, ptr)


def declare_fake(size: int) -> tuple[str, None]:
    path = os.path.join(os.environ["SWAPD_FAKE_GPU_MEM_DIR"], str(os.getpid()))
    with open(path, "w") as out:
        out.write(str(size))
    return "the fake NVML backend (declared)", None


# The allocation, referenced until the process ends.
HELD: list[Any] = []


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bytes", type=int)
    parser.add_argument("--port", type=int, help="answer health checks on this loopback port")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--fake", action="store_true", help="declare to the fake NVML backend")
    mode.add_argument("--dry", action="store_true", help="allocate nothing")
    args = parser.parse_args()
    if args.dry:
        how, keep = "nothing (dry run)", None
    elif args.fake:
        how, keep = declare_fake(args.bytes)
    else:
        how, keep = allocate(args.bytes)
    HELD.append(keep)
    where = os.environ.get("CUDA_VISIBLE_DEVICES", "every GPU")
    print(f"allocated {args.bytes} bytes with {how} on {where}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.port is not None:
        http.server.ThreadingHTTPServer(("127.0.0.1", args.port), _Health).serve_forever()
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
