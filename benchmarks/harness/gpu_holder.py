"""A process that holds a known amount of GPU memory, for the GPU benchmarks (gpu_check,
gpu_placement_check): the one GPU allocation they both run.

    python benchmarks/harness/gpu_holder.py BYTES [--port PORT] [--pattern] [--fake | --dry]

It allocates BYTES on the first GPU CUDA_VISIBLE_DEVICES gives it, with torch, else CuPy, else the
CUDA driver API through ctypes (libcuda ships with the driver, so no CUDA toolkit is needed), and
prints one line `allocated BYTES bytes with HOW on DEVICES`. Then, with --port, it answers GET
with 200 `ok` on 127.0.0.1:PORT (a model's health check) until it is stopped; without, it sleeps
until SIGTERM (exit 0).

`--pattern` (gpu_check --full, `sleep: cuda`): the allocation is made with NVIDIA's Python bindings
(`cuda-bindings`, no torch) and filled with a known pattern, and `POST /v1/chat/completions`
answers whether the pattern is still intact (read back from the GPU, a CUDA call: it blocks while
the driver has the process locked, as a real server's work does) in the answer's content:
`pattern intact (N bytes)` or `pattern CORRUPT ...`.

No GPU here: `--fake` declares BYTES to the fake NVML backend instead (the file
`$SWAPD_FAKE_GPU_MEM_DIR/<pid>`, see daemon/machinery/gpu_fake.py); `--dry` allocates nothing
(the fake backend then reads `$SWAPD_FAKE_GPU_MEM` from this process's environment). With
`--fake --pattern` the pattern is not on a GPU: the answer waits while the checkpoint stand-in has
the process locked (`$SWAPD_FAKE_CUDA_DIR/<pid>.state`) and says `pattern intact (dry run)`.
"""

from __future__ import annotations

import argparse
import ctypes
import http.server
import json
import os
import signal
import sys
import threading
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


# The pattern a `--pattern` holder fills its memory with, as 32-bit words.
PATTERN = 0xA5C3_5A3C
CHUNK = 64 * 1024**2


class Patterned:
    """BYTES of GPU memory allocated with NVIDIA's bindings, filled with `PATTERN`."""

    def __init__(self, size: int) -> None:
        from cuda.bindings import driver  # type: ignore[import-not-found]

        self.driver, self.size = driver, size - size % 4
        self._check(driver.cuInit(0), "cuInit")
        dev = self._check(driver.cuDeviceGet(0), "cuDeviceGet")
        self.ctx = self._check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        self._current()
        self.ptr = self._check(driver.cuMemAlloc(self.size), "cuMemAlloc")
        self._check(driver.cuMemsetD32(self.ptr, PATTERN, self.size // 4), "cuMemsetD32")
        self._check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
        self._lock = threading.Lock()

    def _check(self, result: Any, what: str) -> Any:
        err = result[0]
        if err != self.driver.CUresult.CUDA_SUCCESS:
            sys.exit(f"{what} failed: {err}")
        return result[1] if len(result) > 1 else None

    def _current(self) -> None:
        # Each thread that makes CUDA calls needs the context current.
        self._check(self.driver.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def verify(self) -> str:
        expected = PATTERN.to_bytes(4, "little") * (CHUNK // 4)
        host = bytearray(CHUNK)
        with self._lock:
            self._current()
            for offset in range(0, self.size, CHUNK):
                n = min(CHUNK, self.size - offset)
                err = self.driver.cuMemcpyDtoH(host, int(self.ptr) + offset, n)[0]
                if err != self.driver.CUresult.CUDA_SUCCESS:
                    return f"pattern UNREADABLE at offset {offset}: {err}"
                # Whole chunks compare without a copy (memcmp); only the last is sliced.
                same = host == expected if n == CHUNK else host[:n] == expected[:n]
                if not same:
                    return f"pattern CORRUPT in the {n} bytes at offset {offset}"
        return f"pattern intact ({self.size} bytes)"


class FakePattern:
    """`--fake --pattern`: nothing on a GPU; the answer waits while the checkpoint stand-in has
    the process locked, as the real one's CUDA call would."""

    def verify(self) -> str:
        folder = os.environ.get("SWAPD_FAKE_CUDA_DIR")
        state = os.path.join(folder, f"{os.getpid()}.state") if folder else ""
        while state and os.path.exists(state):
            time.sleep(0.01)
        return "pattern intact (dry run)"


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

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        checked = next((h for h in HELD if hasattr(h, "verify")), None)
        words = checked.verify() if checked is not None else "no pattern (start with --pattern)"
        body = json.dumps(
            {
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": words}}],
                "pid": os.getpid(),
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bytes", type=int)
    parser.add_argument("--port", type=int, help="answer health checks on this loopback port")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--fake", action="store_true", help="declare to the fake NVML backend")
    mode.add_argument("--dry", action="store_true", help="allocate nothing")
    parser.add_argument("--pattern", action="store_true", help="bindings; a pattern to verify")
    args = parser.parse_args()
    if args.pattern:
        if args.fake:
            declare_fake(args.bytes)
            how, keep = "the fake NVML backend (declared), a pattern on no GPU", FakePattern()
        else:
            how, keep = "NVIDIA's CUDA bindings, filled with a pattern", Patterned(args.bytes)
    elif args.dry:
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
