"""Putting a model's server to sleep and waking it (docs/guides/sleep-and-wake.md): the HTTP calls
of its sleep setting, the proof that its GPU memory came back, and the health check after a wake.
The scheduler decides when (policy/stops.py, policy/starts.py); this module does it.

The proof: before the sleep calls, what the model's processes hold on the GPUs is read (NVML's
per-process memory, through the GPU backend: the fake one in tests). After them, the reading is
repeated until it has dropped (to at most half of what it held, or to a CUDA context's worth);
what it holds then is its residual, shown in its status. Placement by memory reads what an asleep
model holds afresh at every decision, so a residual that shrinks a little later costs nothing.
A server that answers its sleep calls but keeps its memory fails the sleep: the scheduler stops
it instead. Without a GPU inventory, or with a CUDA context's worth or less held before, there is
nothing to prove.

`sleep: cuda` sends no call: its processes that hold GPU memory (the same reading) are locked and
checkpointed through the driver (`cuda_sleep.py`), then the same proof follows; its wake restores
and unlocks them, and NVML must show the memory back before the health check.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from ...ipc import watcher_names
from ...ipc.causes import StopCause
from ...ipc.routing_table import HttpCall, SleepMethod, SleepSetting
from ..config import ModelConfig
from ..errors import GpuError, SleepFailed, WakeFailed
from . import gpu, health, process_tree
from .cuda_sleep import CudaSleeper
from .gpu_backend import GpuBackend, GpuProcess, NullBackend
from .model_process import Running

log = logging.getLogger("swapd.lifecycle")

# At most this much held after a sleep needs no proof: a CUDA context and the allocator's
# reserve (PyTorch's is 300-500 MiB), what a server that had nothing loaded holds anyway.
CONTEXT_BYTES = 1024**3
# The release check's polls: often at first (a synchronous sleep, vLLM's, has given its memory
# back by the time it answers, and every poll is swap latency), then gently.
RELEASE_POLLS = ((0.5, 0.01), (2.0, 0.05))
RELEASE_POLL_SLOW = 0.1
# How much of an answer's body a failure quotes.
QUOTE = 200


@dataclass
class SleepFacts:
    """What the machinery learned of one model's sleeps and wakes, for its status (`swapd
    status`, `/running`, the UI) and the metrics."""

    residual: dict[str, int] = field(default_factory=dict)  # GPU UUID -> bytes held asleep
    held_before: dict[str, int] = field(default_factory=dict)  # and before its last sleep
    last_sleep_s: float | None = None  # its last sleep's calls and release check, seconds
    last_wake_s: float | None = None  # its last wake's calls and health check, seconds
    sleeps: int = 0
    wakes: int = 0
    last_failure: str = ""  # the last sleep or wake that failed, and why


# ------------------------------------------------------------------------------------ the calls


async def send(session: aiohttp.ClientSession, base: str, call: HttpCall) -> str:
    """One call to the model's server; "" when it answered 2xx in time, else what went wrong."""
    url = base.rstrip("/") + call.endpoint
    headers = {"Content-Type": "application/json"} if call.body else None
    try:
        async with session.request(
            call.method,
            url,
            data=call.body.encode() if call.body else None,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=call.timeout),
            allow_redirects=False,
        ) as response:
            text = await response.text(errors="replace")
            if 200 <= response.status < 300:
                return ""
            quoted = " ".join(text.split())[:QUOTE]
            return f"answered {response.status}" + (f": {quoted}" if quoted else "")
    except TimeoutError:
        return f"did not answer within {call.timeout:g}s"
    except (aiohttp.ClientError, OSError) as exc:
        return f"failed: {type(exc).__name__}: {exc}"


async def send_all(
    session: aiohttp.ClientSession, base: str, calls: tuple[HttpCall, ...], what: str
) -> str:
    """The calls in order, each once the one before it answered; "" when all did, else which
    failed and how (the rest are not sent)."""
    for index, call in enumerate(calls, 1):
        problem = await send(session, base, call)
        if problem:
            return f"{what} call {index}/{len(calls)} {call.method} {call.endpoint} {problem}"
    return ""


# ------------------------------------------------------------------------- what the GPUs hold


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


def whose(
    running: Running, model: ModelConfig | None, other_pids: Callable[[str], set[int]]
) -> tuple[set[int] | None, tuple[str, ...] | None, set[int]]:
    """Whose GPU memory is the model's: its process tree (a docker model's container is no child
    of it: any process on its GPUs but the other models'), on its GPUs (None: every GPU)."""
    if model is not None and model.cmd_stop and running.gpus:
        return None, running.gpus, other_pids(running.model)
    tree = {running.pid, *(p.pid for p in process_tree.process_tree(running.pid))}
    return tree, running.gpus or None, set()


# ---------------------------------------------------------------------------- sleep and wake


@dataclass
class Sleeper:
    """Sleeps and wakes models through their own servers, and keeps what it learned of each."""

    backend: GpuBackend | None
    release_timeout: float
    # Where the asleep models are marked (a file per model, its pid inside), so that a daemon
    # that restarts adopts them asleep; None: not kept.
    marks: Path | None = None
    facts: dict[str, SleepFacts] = field(default_factory=dict)
    cuda: CudaSleeper = field(default_factory=lambda: CudaSleeper({}))

    def _mark(self, model_id: str) -> Path | None:
        return None if self.marks is None else self.marks / watcher_names.watcher_name(model_id)

    def _marked(self, model_id: str, pid: int | None) -> None:
        mark = self._mark(model_id)
        if mark is None:
            return
        if pid is None:
            mark.unlink(missing_ok=True)
            return
        mark.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        mark.write_text(str(pid))

    def was_asleep(self, model_id: str, pid: int) -> bool:
        """Whether the process `pid` of `model_id` was asleep when the last daemon left it."""
        mark = self._mark(model_id)
        try:
            return mark is not None and int(mark.read_text()) == pid
        except (OSError, ValueError):
            return False

    def of(self, model_id: str) -> SleepFacts:
        found = self.facts.get(model_id)
        if found is None:
            found = self.facts[model_id] = SleepFacts()
        return found

    async def sleep(
        self,
        session: aiohttp.ClientSession,
        model_id: str,
        pid: int,
        base: str,
        setting: SleepSetting,
        where: tuple[Collection[int] | None, Collection[str] | None, Collection[int]],
    ) -> float:
        """Send the sleep calls to `pid`'s server at `base` and prove the memory came back; the
        seconds it took. `where`:
        the model's pids (None: any process but the third item's, a docker model), its GPUs
        (None: every GPU), and the pids of the other models. Raises `SleepFailed`."""
        facts = self.of(model_id)
        began = time.monotonic()
        pids, gpus, others = where
        backend = self.backend
        before: dict[str, int] = {}
        holders: list[int] = []
        if backend is not None:
            try:
                procs = await gpu.read_processes(backend)
                before = held(procs, pids, gpus, others)
                holders = sorted({p.pid for p in gpu.held_by(procs, pids, gpus, others)})
            except Exception as exc:
                log.error("%s: cannot read its GPU memory before the sleep: %s", model_id, exc)
                backend = None
        if setting.method is SleepMethod.CUDA:
            try:
                await self._cuda_sleep(model_id, backend, holders, before, setting)
            except SleepFailed as exc:
                facts.last_failure = exc.message
                raise
        else:
            problem = await send_all(session, base, setting.sleep, "sleep")
            if problem:
                facts.last_failure = problem
                raise SleepFailed(problem)
        residual: dict[str, int] = {}
        if backend is not None:
            try:
                residual = await wait_released(
                    backend, before, pids, gpus, others, self.release_timeout
                )
            except SleepFailed as exc:
                facts.last_failure = exc.message
                raise
            except GpuError as exc:
                log.error("%s: cannot check its GPU memory after the sleep: %s", model_id, exc)
        seconds = time.monotonic() - began
        facts.residual, facts.held_before = residual, before
        facts.last_sleep_s = seconds
        facts.sleeps += 1
        self._marked(model_id, pid)
        log.info(
            "%s asleep in %.2fs (GPU memory: %s before, %s now)",
            model_id,
            seconds,
            _gib(sum(before.values())),
            _gib(sum(residual.values())),
        )
        return seconds

    async def _cuda_sleep(
        self,
        model_id: str,
        backend: GpuBackend | None,
        holders: list[int],
        before: Mapping[str, int],
        setting: SleepSetting,
    ) -> None:
        if backend is None or isinstance(backend, NullBackend):
            raise SleepFailed(
                "sleep: cuda needs the GPU inventory (NVML) to find its processes that hold GPU "
                "memory, and there is none",
                StopCause.CUDA_UNAVAILABLE,
            )
        await self.cuda.sleep(model_id, holders, sum(before.values()), setting.lock_timeout)

    async def _cuda_wake(
        self,
        model_id: str,
        where: tuple[Collection[int] | None, Collection[str] | None, Collection[int]],
    ) -> None:
        """Restore and unlock, then check that NVML shows its memory back."""
        pids, gpus, others = where
        await self.cuda.wake(model_id, sorted(pids or ()))
        before = self.of(model_id).held_before
        if self.backend is None or sum(before.values()) <= CONTEXT_BYTES:
            return
        try:
            now = await read_held(self.backend, pids, gpus, others)
        except GpuError as exc:
            log.error("%s: cannot check its GPU memory after the wake: %s", model_id, exc)
            return
        if sum(now.values()) < sum(before.values()) // 2:
            raise WakeFailed(
                f"its GPU memory is not back after the restore: it holds "
                f"{_gib(sum(now.values()))} of the {_gib(sum(before.values()))} it held before",
                StopCause.CUDA_RESTORE_FAILED,
            )

    async def wake(
        self,
        session: aiohttp.ClientSession,
        model_id: str,
        base: str,
        setting: SleepSetting,
        health_url: str | None,
        health_timeout: float,
        exited: asyncio.Future[Any],
        where: tuple[Collection[int] | None, Collection[str] | None, Collection[int]] = (
            None,
            None,
            (),
        ),
    ) -> float:
        """Send the wake calls (`sleep: cuda`: restore and unlock its processes, found by
        `where` after a daemon restart), then wait for the health check; the seconds it took.
        Raises `WakeFailed`."""
        facts = self.of(model_id)
        began = time.monotonic()
        if setting.method is SleepMethod.CUDA:
            try:
                await self._cuda_wake(model_id, where)
            except WakeFailed as exc:
                facts.last_failure = exc.message
                raise
        problem = await send_all(session, base, setting.wake, "wake")
        if not problem:
            try:
                await health.wait_healthy(
                    session, health_url, timeout=health_timeout, exited=exited
                )
            except health.ProcessExited:
                problem = "its process exited while it woke"
            except health.HealthTimeout:
                problem = f"{health_url} did not answer 200 within {health_timeout:g}s of the wake"
        if problem:
            facts.last_failure = problem
            raise WakeFailed(problem)
        seconds = time.monotonic() - began
        facts.last_wake_s = seconds
        facts.wakes += 1
        facts.residual = {}
        self._marked(model_id, None)
        log.info("%s awake in %.2fs", model_id, seconds)
        return seconds

    def forget(self, model_id: str) -> None:
        """Its process stopped: it holds nothing asleep any more (the durations stay)."""
        facts = self.facts.get(model_id)
        if facts is not None:
            facts.residual = {}
        self.cuda.forget(model_id)
        self._marked(model_id, None)
