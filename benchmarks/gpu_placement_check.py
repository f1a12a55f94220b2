"""Check placement by memory (`gpus: auto`) on a real GPU host: what swapd learns against what the
models really allocated, and how long NVML takes to show a stopped model's memory free.

Run it on the GPU machine, in swapd's venv (torch or cupy installed, or only the driver: the model
falls back to libcuda through ctypes):

    python -m benchmarks gpu_placement_check [--mib 2048,3072,4096] [--timeout 120]

It runs the real swapd (`swapd run`, with circusd, the daemon and the proxy; SWAPD_GPU_BACKEND=nvml)
with one `gpus: auto` model per `--mib` entry, no `vram` hints. Each model
(harness/gpu_holder.py) allocates that many MiB on the GPU CUDA_VISIBLE_DEVICES gives it, then
answers /health. The script starts them one after another through the proxy and prints, per
model:

* allocated MiB, the footprint swapd learned (NVML's per-process memory, summed over the model's
  processes), and their difference (the CUDA context, typically a few hundred MiB);
* where swapd placed it and what it evicted (from `swapd status --json`);

then it unloads each model and prints the time from its process's exit (seen by polling its pid)
to NVML no longer listing it, and to the GPU's used memory coming back to within 64 MiB of what it
was before (NVML read directly, every 10 ms).

`--fake` runs the same script on a machine without a GPU, with the fake NVML backend (the model
declares its bytes in SWAPD_FAKE_GPU_MEM_DIR instead of allocating): a check of the script itself.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from swapd.daemon.machinery.gpu import GpuBackend, make_backend
from tests.support.stack import Stack, free_port_range, wait_for

from .harness.report import Report

# Each model: a process holding its MiB on the GPU and answering /health (gpu_holder.py).
HOLDER = Path(__file__).resolve().parent / "harness" / "gpu_holder.py"
MIB = 1024**2


def status(stack: Stack) -> dict[str, dict]:
    return {m["model"]: m for m in stack.status()["models"]}


def used_of(backend: GpuBackend, uuid: str) -> int:
    devices = backend.devices()
    return next((d.used_bytes for d in devices if d.uuid.casefold() == uuid.casefold()), 0)


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds is not None else "> 30 s"


def start_one(stack: Stack, name: str, size: int, timeout: float) -> None:
    before = {m for m, s in status(stack).items() if s["state"] == "ready"}
    urllib.request.urlopen(f"{stack.url}/upstream/{name}/health", timeout=timeout).close()

    def settled() -> dict | None:
        # Learned and stable: two readings more than one sample (1 s) apart agree.
        first = status(stack)[name]["footprint"]
        time.sleep(1.2)
        again = status(stack)[name]
        return again if first and again["footprint"] == first else None

    model = wait_for(settled, timeout=timeout, what=f"{name}'s footprint")
    learned = sum(model["footprint"].values())
    evicted = sorted(before - {m for m, s in status(stack).items() if s["state"] == "ready"})
    print(
        f"{name:<16} {size // MIB:>7} MiB {learned // MIB:>7} MiB {(learned - size) // MIB:>5} MiB"
        f"  {','.join(model['gpus'])} / {', '.join(evicted) or '-'}"
    )


def main(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser(
        "python -m benchmarks gpu_placement_check", description=__doc__
    )
    parser.add_argument("--mib", default="2048,3072,4096", help="MiB each model allocates")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--fake", action="store_true", help="no GPU: the fake NVML backend")
    args = parser.parse_args(argv)
    sizes = [int(x) * MIB for x in args.mib.split(",")]

    work = Path(tempfile.mkdtemp(prefix="swapd-place-"))
    env = {"SWAPD_GPU_BACKEND": "nvml", "STATE_DIRECTORY": str(work / "state")}
    if args.fake:
        mem_dir = work / "mem"
        mem_dir.mkdir()
        total = sum(sizes) + 4096 * MIB
        env |= {
            "SWAPD_GPU_BACKEND": "fake",
            "SWAPD_FAKE_GPUS": json.dumps([{"name": "fake", "total_bytes": total}]),
            "SWAPD_FAKE_GPU_MEM_DIR": str(mem_dir),
        }
    mode = " --fake" if args.fake else ""
    names = [f"m{i}-{size // MIB}mib" for i, size in enumerate(sizes)]
    config = {
        "healthCheckTimeout": int(args.timeout),
        "startPort": free_port_range(len(names)),
        "models": {
            name: {
                "cmd": f"{sys.executable} {HOLDER} {size} --port ${{PORT}}{mode}",
                "proxy": "http://127.0.0.1:${PORT}",
                "checkEndpoint": "/health",
                "gpus": "auto",
            }
            for name, size in zip(names, sizes, strict=True)
        },
    }
    with Stack(config, env=env) as stack:
        print(f"GPUs: {json.dumps(stack.status()['gpus'], indent=1)}")
        for title in ("first start: never measured, so each clears its GPU", "measured"):
            print(f"\n{title}")
            print(f"{'model':<16} {'allocated':>10} {'learned':>10} {'extra':>8}  placed / evicted")
            for name, size in zip(names, sizes, strict=True):
                start_one(stack, name, size, args.timeout)
        print(f"\nswapd status:\n{stack.swapd('status').stdout}")

        print(f"{'model':<16} {'exit -> NVML lists no pid':>26} {'exit -> used back':>18}")
        # NVML read here directly (the same backend swapd uses), polled every 10 ms.
        backend = make_backend(env["SWAPD_GPU_BACKEND"], environ=stack.env)
        for name in names:
            model = status(stack)[name]
            if model["state"] != "ready":
                continue
            pid, uuid = model["pid"], model["gpus"][0]
            held = sum(p.used_bytes or 0 for p in backend.processes() if p.pid == pid)
            baseline = used_of(backend, uuid) - held
            unload = subprocess.Popen(
                [sys.executable, "-m", "swapd.daemon.cli", "unload", name,
                 "--run-dir", str(stack.run_dir)],
                env=stack.env, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            wait_for(lambda pid=pid: not psutil.pid_exists(pid), 60, 0.002, f"{name} to exit")
            exited = time.monotonic()
            gone = back = None
            while time.monotonic() < exited + 30 and (gone is None or back is None):
                if gone is None and all(p.pid != pid for p in backend.processes()):
                    gone = time.monotonic() - exited
                if back is None and used_of(backend, uuid) <= baseline + 64 * MIB:
                    back = time.monotonic() - exited
                time.sleep(0.01)
            unload.wait(60)
            print(f"{name:<16} {_ms(gone):>26} {_ms(back):>18}")
        backend.close()
    return 0
