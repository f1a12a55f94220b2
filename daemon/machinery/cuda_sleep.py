"""`sleep: cuda`: putting any CUDA server to sleep from outside, through the driver's checkpoint
calls (`cuda_backend.py`), and waking it (docs/guides/sleep-and-wake.md, "cuda").

To sleep: the host must have room for the checkpoint (the model's measured GPU footprint, plus a
reserve, within `/proc/meminfo`'s MemAvailable), then every process of the model that holds GPU
memory (`sleeping.py` finds them: NVML's per-process list, the model's process tree or a docker
model's container) is locked, its lock bounded by `lockTimeout` so that a CUDA call in flight
cannot hang the swap, then checkpointed (its GPU memory copied to host RAM and released). To wake:
each is restored and unlocked in turn; `sleeping.py` then checks that NVML shows the memory back
and waits for the health check. Any failure is a `SleepFailed` or `WakeFailed` with its own cause
(`StopCause.CUDA_*`, `HOST_MEMORY_SHORT`): the scheduler stops the model instead, or stops it and
starts it cold. A sleep that fails half-way first gives back what it took (restores, unlocks), so
that the stop that follows meets a running process.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ...ipc.causes import StopCause
from ..errors import SleepFailed, WakeFailed
from . import gpu
from .cuda_backend import (
    CheckpointBackend,
    CheckpointError,
    ProcessState,
    Step,
    Unavailable,
)
from .cuda_choice import make_checkpointer
from .gpu_backend import GpuBackend

log = logging.getLogger("swapd.lifecycle")

MEMINFO = Path("/proc/meminfo")
# Host memory the checkpoint must leave free, beyond the footprint it copies: the host's own
# working set (page cache, the daemon, the server's own host memory grows by the driver's staging).
HOST_RESERVE = 1024**3
# A lock's own timeout is the driver's; this much more is how long the call may take before it
# is given up on from here (a driver that ignores its timeout).
LOCK_GRACE = 5.0


def mem_available(meminfo: Path = MEMINFO) -> int | None:
    """The host's MemAvailable, bytes (None: not readable here, e.g. not Linux)."""
    try:
        for line in meminfo.read_text().splitlines():
            key, _, rest = line.partition(":")
            if key == "MemAvailable":
                return int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass
class CudaSleeper:
    """The driver's checkpoint calls for `sleep: cuda` models, and which processes of each it
    checkpointed (what a wake restores)."""

    environ: Mapping[str, str]
    meminfo: Path = MEMINFO
    backend: CheckpointBackend | Unavailable | None = None  # None: chosen at its first use
    checkpointed: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # By model id, its last sleep's or wake's steps: (step, pid, seconds), for the log and the
    # GPU check (a swap puts several models to sleep side by side).
    steps: dict[str, list[tuple[Step, int, float]]] = field(default_factory=dict)

    def chosen(self) -> CheckpointBackend | Unavailable:
        if self.backend is None:
            self.backend = make_checkpointer(self.environ)
        return self.backend

    async def _chosen(self) -> CheckpointBackend | Unavailable:
        # Its first use imports the bindings and calls cuInit: not on the event loop.
        return self.backend if self.backend is not None else await asyncio.to_thread(self.chosen)

    async def _call(self, model_id: str, step: Step, pid: int, *args: float) -> None:
        backend = self.chosen()
        assert not isinstance(backend, Unavailable)
        began = time.monotonic()
        call = getattr(backend, str(step))
        if step is Step.LOCK:
            try:
                await asyncio.wait_for(asyncio.to_thread(call, pid, *args), args[0] + LOCK_GRACE)
            except TimeoutError:
                raise CheckpointError(
                    step, pid, f"did not return within {args[0] + LOCK_GRACE:g}s", timed_out=True
                ) from None
        else:
            await asyncio.to_thread(call, pid)
        self.steps.setdefault(model_id, []).append((step, pid, time.monotonic() - began))

    async def sleep_model(
        self,
        model_id: str,
        backend: GpuBackend | None,
        where: tuple[Collection[int] | None, Collection[str] | None, Collection[int]],
        footprint: int,
        lock_timeout: float,
    ) -> None:
        """Lock and checkpoint the model's processes that hold GPU memory (NVML's list, `where`
        as `sleep_proof.whose` says: its pids, its GPUs, the other models' pids). `backend` None:
        no GPU inventory, so which they are is not known."""
        if backend is None:
            raise SleepFailed(
                "sleep: cuda needs the GPU inventory (NVML) to find its processes that hold GPU "
                "memory, and there is none",
                StopCause.CUDA_UNAVAILABLE,
            )
        pids, gpus, others = where
        try:
            procs = await gpu.read_processes(backend)
        except Exception as exc:
            raise SleepFailed(
                f"cannot read which of its processes hold GPU memory: {exc}",
                StopCause.CUDA_UNAVAILABLE,
            ) from exc
        holders = sorted({p.pid for p in gpu.held_by(procs, pids, gpus, others)})
        await self.sleep(model_id, holders, footprint, lock_timeout)

    async def wake_model(
        self,
        model_id: str,
        backend: GpuBackend | None,
        where: tuple[Collection[int] | None, Collection[str] | None, Collection[int]],
        held_before: Mapping[str, int] | None,
        proof_above: int,
    ) -> None:
        """Restore and unlock, then check that NVML shows at least half of what it held before
        its sleep back (when that was more than `proof_above` bytes, and measured)."""
        pids, gpus, others = where
        await self.wake(model_id, sorted(pids or ()))
        before = sum((held_before or {}).values())
        if backend is None or before <= proof_above:
            return
        try:
            procs = await gpu.read_processes(backend)
        except Exception as exc:  # NVML's errors, GpuError: the wake goes on unproven
            log.error("%s: cannot check its GPU memory after the restore: %s", model_id, exc)
            return
        now = sum(p.used_bytes or 0 for p in gpu.held_by(procs, pids, gpus, others))
        if now < before // 2:
            raise WakeFailed(
                f"its GPU memory is not back after the restore: it holds {_gib(now)} of the "
                f"{_gib(before)} it held before",
                StopCause.CUDA_RESTORE_FAILED,
            )

    async def sleep(
        self, model_id: str, pids: Collection[int], footprint: int, lock_timeout: float
    ) -> None:
        """Lock and checkpoint `pids` (the model's processes that hold GPU memory, `footprint`
        bytes in all). Raises `SleepFailed` with its cause; what it did is undone first."""
        backend = await self._chosen()
        self.steps[model_id] = []
        if isinstance(backend, Unavailable):
            raise SleepFailed(
                f"sleep: cuda cannot be used here: {backend.reason}", StopCause.CUDA_UNAVAILABLE
            )
        available = await asyncio.to_thread(mem_available, self.meminfo)
        if available is not None and footprint + HOST_RESERVE > available:
            raise SleepFailed(
                f"the host has {_gib(available)} of memory available, too little for the "
                f"checkpoint of its {_gib(footprint)} of GPU memory (and {_gib(HOST_RESERVE)} "
                "to spare)",
                StopCause.HOST_MEMORY_SHORT,
            )
        locked: list[int] = []
        done: list[int] = []
        try:
            for pid in pids:
                await self._call(model_id, Step.LOCK, pid, lock_timeout)
                locked.append(pid)
            for pid in pids:
                await self._call(model_id, Step.CHECKPOINT, pid)
                done.append(pid)
        except CheckpointError as exc:
            await self._undo(model_id, locked, done)
            if exc.step is Step.LOCK and exc.timed_out:
                raise SleepFailed(
                    f"{exc} (a CUDA call in flight longer than its lockTimeout, {lock_timeout:g}s)",
                    StopCause.CUDA_LOCK_TIMEOUT,
                ) from exc
            raise SleepFailed(str(exc), StopCause.CUDA_CHECKPOINT_FAILED) from exc
        self.checkpointed[model_id] = tuple(pids)
        log.info("%s checkpointed: %s", model_id, self.said(model_id))

    async def _undo(self, model_id: str, locked: list[int], done: list[int]) -> None:
        """Give back what a failed sleep took: restore the checkpointed, unlock the locked."""
        for pid in reversed(locked):
            try:
                if pid in done:
                    await self._call(model_id, Step.RESTORE, pid)
                await self._call(model_id, Step.UNLOCK, pid)
            except CheckpointError as exc:
                log.warning("%s: after its failed sleep, %s", model_id, exc)

    async def wake(self, model_id: str, tree: Collection[int]) -> None:
        """Restore and unlock what its sleep checkpointed, each in turn; after a daemon restart
        (nothing recorded), whatever of its process `tree` the driver says is checkpointed or
        locked. Raises `WakeFailed` with its cause."""
        backend = await self._chosen()
        self.steps[model_id] = []
        if isinstance(backend, Unavailable):
            raise WakeFailed(
                f"sleep: cuda cannot be used here: {backend.reason}", StopCause.CUDA_RESTORE_FAILED
            )
        recorded = self.checkpointed.pop(model_id, None)
        try:
            if recorded is not None:
                for pid in recorded:
                    await self._call(model_id, Step.RESTORE, pid)
                    await self._call(model_id, Step.UNLOCK, pid)
            else:
                for pid in tree:
                    await self._adopted(model_id, pid)
        except CheckpointError as exc:
            raise WakeFailed(str(exc), StopCause.CUDA_RESTORE_FAILED) from exc
        log.info("%s restored: %s", model_id, self.said(model_id))

    async def _adopted(self, model_id: str, pid: int) -> None:
        backend = self.chosen()
        assert not isinstance(backend, Unavailable)
        try:
            state = await asyncio.to_thread(backend.state, pid)
        except CheckpointError:
            return  # no CUDA process: nothing of it was checkpointed
        if state is ProcessState.CHECKPOINTED:
            await self._call(model_id, Step.RESTORE, pid)
            state = ProcessState.LOCKED
        if state is ProcessState.LOCKED:
            await self._call(model_id, Step.UNLOCK, pid)

    def forget(self, model_id: str) -> None:
        self.checkpointed.pop(model_id, None)

    def said(self, model_id: str) -> str:
        """Its last sleep's or wake's steps, for a log line."""
        steps = self.steps.get(model_id, [])
        return ", ".join(f"{step} {pid} {seconds:.2f}s" for step, pid, seconds in steps)


def _gib(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB"
