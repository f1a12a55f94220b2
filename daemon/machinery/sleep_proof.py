"""The proof that a sleeping model's GPU memory came back (`sleeping.py` runs it): what the
model's processes hold on its GPUs (NVML's per-process memory through the GPU backend, the fake
one in tests), read before the sleep calls and again until it has dropped to at most half, or to a
CUDA context's worth; what it holds then is its residual. Also whose memory is the model's (its
process tree; a docker model's: any process on its GPUs but the other models'), and a sleep's
figures in words for the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping

from ..config import ModelConfig
from ..errors import GpuError, SleepFailed
from . import gpu, process_tree
from .gpu_backend import GpuBackend, GpuProcess, NullBackend
from .model_process import Running

# At most this much held after a sleep needs no proof: a CUDA context and the allocator's
# reserve (PyTorch's is 300-500 MiB), what a server that had nothing loaded holds anyway.
CONTEXT_BYTES = 1024**3
# The release check's polls: often at first (a synchronous sleep, vLLM's, has given its memory
# back by the time it answers, and every poll is swap latency), then gently.
RELEASE_POLLS = ((0.5, 0.01), (2.0, 0.05))
RELEASE_POLL_SLOW = 0.1


def held(
    procs: Collection[GpuProcess],
    pids: Collection[int] | None,
    gpus: Collection[str] | None,
    ignore_pids: Collection[int],
) -> dict[str, int]:
    """GPU UUID (case-folded) -> bytes the model's processes hold there (`pids` None: any
    process on its `gpus` but `ignore_pids`, a docker model's; `gpus` None: every GPU)."""
    found: dict[str, int] = {}
    for p in gpu.held_by(procs, pids, gpus, ignore_pids):
        key = p.gpu.casefold()
        found[key] = found.get(key, 0) + (p.used_bytes or 0)
    return found


async def read_held(
    backend: GpuBackend,
    pids: Collection[int] | None,
    gpus: Collection[str] | None,
    ignore_pids: Collection[int],
) -> dict[str, int]:
    try:
        procs = await gpu.read_processes(backend)
    except GpuError:
        raise
    except Exception as exc:
        raise GpuError(f"reading GPU processes failed: {type(exc).__name__}: {exc}") from exc
    return held(procs, pids, gpus, ignore_pids)


def released(before: Mapping[str, int], now: Mapping[str, int]) -> bool:
    """Whether what is held `now` shows the memory held `before` came back."""
    total = sum(now.values())
    return total <= max(CONTEXT_BYTES, sum(before.values()) // 2)


async def wait_released(
    backend: GpuBackend,
    before: Mapping[str, int],
    pids: Collection[int] | None,
    gpus: Collection[str] | None,
    ignore_pids: Collection[int],
    timeout: float,
) -> dict[str, int]:
    """What the model holds once its memory dropped (its residual). Raises `SleepFailed` when it
    has not dropped within `timeout` seconds."""
    if isinstance(backend, NullBackend) or sum(before.values()) <= CONTEXT_BYTES:
        # Nothing to prove: no inventory, or it held no more than a CUDA context.
        return dict(await read_held(backend, pids, gpus, ignore_pids)) if before else {}
    loop = asyncio.get_running_loop()
    began = loop.time()
    while True:
        now = await read_held(backend, pids, gpus, ignore_pids)
        if released(before, now):
            return now
        elapsed = loop.time() - began
        if elapsed >= timeout:
            raise SleepFailed(
                f"its GPU memory did not come back within {timeout:g}s of the sleep: it holds "
                f"{_gib(sum(now.values()))} of the {_gib(sum(before.values()))} it held before"
            )
        await asyncio.sleep(min(_poll(elapsed), timeout - elapsed))


def _poll(elapsed: float) -> float:
    for until, interval in RELEASE_POLLS:
        if elapsed < until:
            return interval
    return RELEASE_POLL_SLOW


def _gib(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB"


NOT_MEASURED = "not measured"


def memory_words(before: Mapping[str, int] | None, now: Mapping[str, int] | None) -> str:
    """A sleep's figures for the log: what was read, and "not measured" for what was not (no GPU
    inventory, or NVML failed), never a 0.00 GiB that no one read."""
    if before is None and now is None:
        return f"{NOT_MEASURED} (no GPU inventory)"
    first = NOT_MEASURED if before is None else _gib(sum(before.values()))
    second = NOT_MEASURED if now is None else _gib(sum(now.values()))
    return f"{first} before, {second} now"


def whose(
    running: Running, model: ModelConfig | None, other_pids: Callable[[str], set[int]]
) -> tuple[set[int] | None, tuple[str, ...] | None, set[int]]:
    """Whose GPU memory is the model's: its process tree (a docker model's container is no child
    of it: any process on its GPUs but the other models'), on its GPUs (None: every GPU)."""
    if model is not None and model.cmd_stop and running.gpus:
        return None, running.gpus, other_pids(running.model)
    tree = {running.pid, *(p.pid for p in process_tree.process_tree(running.pid))}
    return tree, running.gpus or None, set()
