"""`gpu_check --full`'s two `sleep: cuda` sections (benchmarks/gpu_check.py runs them):

1. `suspend`: one holder process (gpu_holder.py --pattern: N bytes allocated with NVIDIA's
   bindings, filled with a known pattern) put to sleep and woken through swapd's own code path
   (`Sleeper` with the `cuda` preset: lock, checkpoint, then the release check; restore, unlock,
   the check that the memory is back, the health check), NVML's figure before and after each,
   the time of each step, and the holder reading its pattern back.
2. `swapd`: a real `swapd run` with two holders as `sleep: cuda` models with `gpus: auto`,
   swapped back and forth through the proxy; a ballast process (not a model) holds the rest of
   the GPU but room for one and a half holders, so that placement by memory cannot run both and
   each start puts the other to sleep. Each answer is the woken holder reading its pattern back,
   with the wake's time, the residual and the placement swapd learned.

Each adds rows (section, what, figure) to the table gpu_check prints. With `fake`, the fake NVML
backend and the checkpoint stand-in (daemon/machinery/cuda_fake.py) stand for the GPU.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from swapd.daemon.config.sections.sleep_fields import PRESETS
from swapd.daemon.machinery.cuda_sleep import CudaSleeper
from swapd.daemon.machinery.gpu_backend import GpuBackend
from swapd.daemon.machinery.sleeping import Sleeper
from tests.support.stack import Stack, free_port_range, wait_for

HOLDER = Path(__file__).resolve().parent / "gpu_holder.py"
GIB = 1024**3
Rows = list[tuple[str, str, str]]


def gib(n: int | float) -> str:
    return f"{n / GIB:.2f} GiB"


def _held(backend: GpuBackend, pid: int) -> int:
    return sum(p.used_bytes or 0 for p in backend.processes() if p.pid == pid)


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def ask(base: str, model: str, timeout: float = 300.0) -> str:
    """A chat through `base` (a holder, or the proxy): the holder's words on its pattern."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "check"}]})
    request = urllib.request.Request(
        base + "/v1/chat/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return str(answer["choices"][0]["message"]["content"])


async def suspend(
    backend: GpuBackend, size: int, gpu: tuple[int, str], env: dict[str, str], rows: Rows
) -> bool:
    """Section 1; False when a step failed (its row says which)."""
    index, uuid = gpu
    port = free_port_range(1)
    fake = ["--fake"] if env.get("SWAPD_GPU_BACKEND") == "fake" else []
    holder = await asyncio.to_thread(
        subprocess.Popen,
        [sys.executable, str(HOLDER), str(size), "--port", str(port), "--pattern", *fake],
        env={**env, "CUDA_VISIBLE_DEVICES": str(index)},
        stdout=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert holder.stdout is not None
        began = time.monotonic()
        line = (await asyncio.to_thread(holder.stdout.readline)).strip()
        rows.append(("suspend", "holder allocated", f"{line} in {time.monotonic() - began:.2f} s"))
        await asyncio.to_thread(
            wait_for, lambda: _held(backend, holder.pid), 60, 0.05, "NVML to list the holder"
        )
        await asyncio.to_thread(wait_for, lambda: _healthy(base), 60, 0.05, "the holder's health")
        before = _held(backend, holder.pid)
        rows.append(("suspend", "NVML: the holder holds, awake", gib(before)))
        sleeper = Sleeper(backend, 60.0, cuda=CudaSleeper(env))
        setting = PRESETS["cuda"]
        where = ({holder.pid}, (uuid,), set[int]())
        async with aiohttp.ClientSession() as session:
            try:
                took = await sleeper.sleep(session, "holder", holder.pid, base, setting, where)
            except Exception as exc:
                rows.append(("suspend", "sleep FAILED", str(exc)))
                return False
            for step, pid, seconds in sleeper.cuda.steps["holder"]:
                rows.append(("suspend", f"{step} pid {pid}", f"{seconds:.3f} s"))
            facts = sleeper.of("holder")
            rows.append(("suspend", "sleep in all (with the release check)", f"{took:.3f} s"))
            rows.append(
                ("suspend", "NVML: held asleep (residual)", gib(sum(facts.residual.values())))
            )
            rows.append(("suspend", "NVML: the process, asleep", gib(_held(backend, holder.pid))))
            exited: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            try:
                took = await sleeper.wake(
                    session, "holder", base, setting, base + "/health", 60.0, exited, where=where
                )
            except Exception as exc:
                rows.append(("suspend", "wake FAILED", str(exc)))
                return False
            for step, pid, seconds in sleeper.cuda.steps["holder"]:
                rows.append(("suspend", f"{step} pid {pid}", f"{seconds:.3f} s"))
            rows.append(("suspend", "wake in all (with the health check)", f"{took:.3f} s"))
        rows.append(("suspend", "NVML: the holder holds, woken", gib(_held(backend, holder.pid))))
        words = await asyncio.to_thread(ask, base, "holder")
        rows.append(("suspend", "the holder reads its memory back", words))
        return words.startswith("pattern intact")
    finally:
        holder.terminate()
        await asyncio.to_thread(holder.wait, 30)


def swapd(
    size: int, gpu: tuple[int, int], env: dict[str, str], rows: Rows, rounds: int = 2
) -> bool:
    """Section 2 on the GPU `gpu` (its index, its free bytes); False when a wake was not
    verified."""
    index, free = gpu
    fake = ["--fake"] if env.get("SWAPD_GPU_BACKEND") == "fake" else []
    ballast_bytes = free - size * 3 // 2
    if ballast_bytes <= 0:
        rows.append(("swapd", "SKIPPED", f"the GPU has {gib(free)} free: too little for two"))
        return False
    ballast = subprocess.Popen(
        [sys.executable, str(HOLDER), str(ballast_bytes), *fake],
        env={**env, "CUDA_VISIBLE_DEVICES": str(index)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert ballast.stdout is not None
        line = ballast.stdout.readline().strip()
        rows.append(("swapd", "ballast (not a model)", line or f"FAILED ({ballast.wait()})"))
        return bool(line) and _swap(size, " ".join(fake), env, rows, rounds)
    finally:
        ballast.terminate()
        ballast.wait(30)


def _swap(size: int, fake: str, env: dict[str, str], rows: Rows, rounds: int) -> bool:
    rows.append(("swapd", "each holder holds", gib(size)))
    names = ["h0", "h1"]
    config = {
        "healthCheckTimeout": 120,
        "startPort": free_port_range(len(names)),
        "models": {
            name: {
                "cmd": f"{sys.executable} {HOLDER} {size} --port ${{PORT}} --pattern {fake}",
                "proxy": "http://127.0.0.1:${PORT}",
                "checkEndpoint": "/health",
                "gpus": "auto",
                "sleep": "cuda",
            }
            for name in names
        },
    }
    ok = True
    with Stack(config, env=env) as stack:
        for turn in range(rounds * len(names)):
            name = names[turn % len(names)]
            began = time.monotonic()
            words = ask(stack.url, name)
            seconds = time.monotonic() - began
            ok = ok and words.startswith("pattern intact")
            # Its footprint learned (NVML sampled while it was ready) before the next swap, so
            # that placement decides by what it measured.
            try:
                wait_for(lambda name=name: _footprint(stack, name), 15, 0.2, f"{name}'s footprint")
            except AssertionError:
                rows.append(("swapd", f"{name}: footprint", "not learned within 15 s"))
            _, swaps = stack.get_json("/api/swaps")
            last = [s for s in swaps["swaps"] if s["model"] == name][-1]
            phases = ", ".join(f"{k} {v:.3f} s" for k, v in last["phases"].items())
            rows.append(("swapd", f"{name}: {last['kind']} ({seconds:.2f} s at the client)", words))
            rows.append(("swapd", f"{name}: its phases", phases or "-"))
        for model in stack.status()["models"]:
            sleep = model.get("sleep") or {}
            rows.append(
                (
                    "swapd",
                    f"{model['model']}: {model['state']}, on {','.join(model['gpus']) or '-'}",
                    f"footprint {gib(sum((model.get('footprint') or {}).values()))}, "
                    f"held before sleep {gib(sum((sleep.get('held_before') or {}).values()))}, "
                    f"residual {gib(sum((sleep.get('residual') or {}).values()))}, "
                    f"{sleep.get('sleeps', 0)} sleeps, {sleep.get('wakes', 0)} wakes",
                )
            )
    return ok


def _footprint(stack: Stack, name: str) -> int:
    model = next(m for m in stack.status()["models"] if m["model"] == name)
    return sum((model.get("footprint") or {}).values())


def fake_env(work: Path, total: int) -> dict[str, str]:
    """The environment of a dry run: one fake GPU of `total` bytes, the checkpoint stand-in, a
    host with 64 GiB of memory available for the checkpoints (whatever this one has)."""
    (work / "mem").mkdir(parents=True, exist_ok=True)
    (work / "meminfo").write_text(f"MemAvailable: {64 * 1024**2} kB\n")
    return {
        "SWAPD_MEMINFO": str(work / "meminfo"),
        **os.environ,
        "SWAPD_GPU_BACKEND": "fake",
        "SWAPD_FAKE_GPUS": json.dumps([{"name": "Fake GPU", "total_bytes": total}]),
        "SWAPD_FAKE_GPU_MEM_DIR": str(work / "mem"),
        "SWAPD_FAKE_CUDA_DIR": str(work / "cuda"),
        "SWAPD_FAKE_GPU_SCOPE": str(work),
        "STATE_DIRECTORY": str(work / "state"),
    }
