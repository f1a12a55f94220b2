"""Check swapd's NVML backend on a real GPU host, and time GPU memory release after an exit.

Run it on the GPU machine, in swapd's venv: `python -m benchmarks gpu_check [--gpu 0] [--mib 1024]`
(`--backend fake`: a dry run without a GPU, one fake GPU unless SWAPD_FAKE_GPUS says otherwise).

1. NvmlBackend inventory (index, UUID, name, total/used/free) and the cost of one process listing.
2. A child process (harness/gpu_holder.py) allocates --mib MiB on --gpu (torch, else cupy, else
   the CUDA driver API through ctypes: libcuda ships with the driver, so no CUDA toolkit). The
   script waits until NVML lists the child on that GPU and prints what NVML reports for it.
3. The child exits (SIGTERM, or SIGKILL with --kill); the script times how long, after the exit was
   reaped, `wait_released` takes to see the process gone, and how long the GPU's `used` takes to
   come back to what it was before the child started.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import time
from pathlib import Path

from .harness.report import Report

# The process holding GPU memory (shared with gpu_placement_check.py).
HOLDER = Path(__file__).resolve().parent / "harness" / "gpu_holder.py"


def _mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:.0f} MiB"


def main(argv: list[str], report: Report) -> int:
    return asyncio.run(check(argv))


async def check(argv: list[str]) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks gpu_check", description=__doc__)
    parser.add_argument("--gpu", default="0", help="GPU index or UUID (default 0)")
    parser.add_argument("--mib", type=int, default=1024, help="MiB to allocate (default 1024)")
    parser.add_argument("--kill", action="store_true", help="SIGKILL the child instead of SIGTERM")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument(
        "--backend", default="nvml", help="'fake' dry-runs this script without a GPU"
    )
    args = parser.parse_args(argv)
    if args.backend == "fake":
        os.environ.setdefault("SWAPD_FAKE_GPUS", "1")

    from swapd.daemon.machinery import gpu

    t = time.perf_counter()
    try:
        backend = gpu.make_backend(args.backend)
    except gpu.GpuError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    print(f"nvmlInit + inventory handles: {(time.perf_counter() - t) * 1e3:.1f} ms")
    devices = backend.devices()
    for d in devices:
        print(
            f"GPU {d.index}: {d.name} {d.uuid} total {_mib(d.total_bytes)} "
            f"used {_mib(d.used_bytes)} free {_mib(d.free_bytes)}"
        )
    (target,) = gpu.resolve_gpus((args.gpu,), devices)
    costs = []
    for _ in range(20):
        t = time.perf_counter()
        before = backend.processes()
        costs.append(time.perf_counter() - t)
    print(
        f"processes(): median {statistics.median(costs) * 1e3:.2f} ms over 20 calls; "
        f"{len(before)} process(es) on the GPUs now"
    )
    baseline = next(d for d in backend.devices() if d.index == target.index).used_bytes

    size = args.mib * 2**20
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(target.index), "SWAPD_FAKE_GPU_MEM": str(size)}
    dry = ["--dry"] if args.backend == "fake" else []
    started = time.perf_counter()
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(HOLDER), str(size), *dry, env=env, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        line = (await child.stdout.readline()).decode().strip()
        if not line:
            print(f"child failed to allocate (exit {await child.wait()})")
            return 1
        print(f"child pid {child.pid}: {line} after {time.perf_counter() - started:.2f} s")
        seen = None
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            mine = [p for p in backend.processes() if p.pid == child.pid]
            if mine:
                seen = mine
                break
            await asyncio.sleep(0.01)
        if seen is None:
            print("NVML never listed the child (in a container without the host pid namespace?)")
        else:
            for p in seen:
                where = f"GPU {p.gpu_index} ({p.gpu_uuid})"
                print(f"NVML: pid {p.pid} on {where} uses {_mib(p.used_bytes)}")
        used = next(d for d in backend.devices() if d.index == target.index).used_bytes
        print(f"GPU {target.index} used: {_mib(baseline)} before, {_mib(used)} with the child")

        child.send_signal(signal.SIGKILL if args.kill else signal.SIGTERM)
        t_signal = time.perf_counter()
        await child.wait()
        t_exit = time.perf_counter()
        took = (t_exit - t_signal) * 1e3
        print(f"child exited (code {child.returncode}) {took:.1f} ms after the signal")
        lingering = await gpu.wait_released(
            backend, {child.pid}, (target.uuid,), timeout=args.timeout, poll=0.005
        )
        t_released = time.perf_counter()
        print(
            f"wait_released: {'released' if not lingering else f'LINGERING {lingering}'} "
            f"{(t_released - t_exit) * 1e3:.1f} ms after the exit was reaped"
        )
        tolerance = 64 * 2**20
        while time.perf_counter() - t_exit < args.timeout:
            used = next(d for d in backend.devices() if d.index == target.index).used_bytes
            if used <= baseline + tolerance:
                break
            await asyncio.sleep(0.005)
        print(
            f"GPU {target.index} used back to {_mib(used)} (baseline {_mib(baseline)} + 64 MiB) "
            f"{(time.perf_counter() - t_exit) * 1e3:.1f} ms after the exit was reaped"
        )
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        backend.close()
    return 0
