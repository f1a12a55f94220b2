"""Putting a model's server to sleep and waking it (docs/guides/sleep-and-wake.md): the HTTP calls
of its sleep setting, the proof that its GPU memory came back, and the health check after a wake.
The scheduler decides when (policy/stops.py, policy/starts.py); this module does it.

The proof (`sleep_proof.py`): before the sleep calls, what the model's processes hold on the GPUs
is read (NVML's per-process memory, through the GPU backend: the fake one in tests). After them,
the reading is repeated until it has dropped (to at most half of what it held, or to a CUDA
context's worth); what it holds then is its residual, shown in its status. Placement by memory
reads what an asleep model holds afresh at every decision, so a residual that shrinks a little
later costs nothing. A server that answers its sleep calls but keeps its memory fails the sleep:
the scheduler stops it instead. Without a GPU inventory, or with a CUDA context's worth or less
held before, there is nothing to prove.

`sleep: cuda` sends no call: the driver locks and checkpoints the model's GPU processes
(`cuda_sleep.py`), then the same proof follows; its wake restores and unlocks them, and NVML must
show the memory back before the health check.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from ...ipc import watcher_names
from ...ipc.routing_table import HttpCall, SleepMethod, SleepSetting
from ...ipc.swap_record import SwapPhase
from ..config import WakeProbe
from ..errors import GpuError, SleepFailed, WakeFailed, WakeUnverified
from . import health, server_call, wake_probe
from .cuda_sleep import CudaSleeper
from .gpu_backend import GpuBackend, NullBackend
from .sleep_proof import CONTEXT_BYTES, memory_words, read_held, wait_released

log = logging.getLogger("swapd.lifecycle")

# How much of an answer's body a failure quotes.
QUOTE = 200


@dataclass
class SleepFacts:
    """What the machinery learned of one model's sleeps and wakes, for its status (`swapd
    status`, `/running`, the UI) and the metrics."""

    # GPU UUID -> bytes held asleep, and before its last sleep; None where its last sleep could
    # not measure them (no GPU inventory, or NVML failed): "not measured", never "nothing".
    residual: dict[str, int] | None = field(default_factory=dict)
    held_before: dict[str, int] | None = field(default_factory=dict)
    last_sleep_s: float | None = None  # its last sleep's calls and release check, seconds
    last_wake_s: float | None = None  # its last wake's calls and health check, seconds
    sleeps: int = 0
    wakes: int = 0
    last_failure: str = ""  # the last sleep or wake that failed, and why
    # What its process answered its `wakeProbe` before its first sleep (None: not recorded),
    # and the process asked (once each: a server that gives no answer is warned about once).
    probe_answer: str | None = None
    probe_pid: int | None = None
    verified: int = 0  # wakes its probe proved


# ------------------------------------------------------------------------------------ the calls


async def send(session: aiohttp.ClientSession, base: str, call: HttpCall) -> str:
    """One call to the model's server; "" when it answered 2xx in time, else what went wrong."""
    try:
        status, text = await server_call.call(
            session, base, call.method, call.endpoint, call.body, call.timeout
        )
    except server_call.CallFailed as exc:
        return str(exc)
    if 200 <= status < 300:
        return ""
    quoted = " ".join(text.split())[:QUOTE]
    return f"answered {status}" + (f": {quoted}" if quoted else "")


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
    # Told how long each probe took: (model id, VERIFY, seconds), as the lifecycle's phases.
    on_phase: Callable[[str, SwapPhase, float], None] = lambda *_: None
    # `sleep: cuda`'s driver calls, and what each model's sleep checkpointed.
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
        probe: WakeProbe | None = None,
    ) -> float:
        """Send the sleep calls to `pid`'s server at `base` and prove the memory came back; the
        seconds it took. `where`:
        the model's pids (None: any process but the third item's, a docker model), its GPUs
        (None: every GPU), and the pids of the other models. `probe`: the model's `wakeProbe`,
        whose answer is recorded before the process's first sleep. Raises `SleepFailed`."""
        facts = self.of(model_id)
        if probe is not None and facts.probe_pid != pid and wake_probe.needs_record(probe):
            facts.probe_pid, facts.probe_answer = pid, None
            await self._record(session, model_id, base, probe, facts)
        began = time.monotonic()
        pids, gpus, others = where
        # No inventory: nothing is measured, and nothing is said to be.
        backend = None if isinstance(self.backend, NullBackend) else self.backend
        before: dict[str, int] = {}
        if backend is not None:
            try:
                before = await read_held(backend, pids, gpus, others)
            except GpuError as exc:
                log.error("%s: cannot read its GPU memory before the sleep: %s", model_id, exc)
                backend = None
        if setting.method is SleepMethod.CUDA:
            try:
                await self.cuda.sleep_model(
                    model_id, backend, where, sum(before.values()), setting.lock_timeout
                )
            except SleepFailed as exc:
                facts.last_failure = exc.message
                raise
        else:
            problem = await send_all(session, base, setting.sleep, "sleep")
            if problem:
                facts.last_failure = problem
                raise SleepFailed(problem)
        residual: dict[str, int] | None = None
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
        measured = backend is not None
        facts.residual = residual
        facts.held_before = before if measured else None
        facts.last_sleep_s = seconds
        facts.sleeps += 1
        self._marked(model_id, pid)
        log.info(
            "%s asleep in %.2fs (GPU memory: %s)",
            model_id,
            seconds,
            memory_words(before if measured else None, residual),
        )
        return seconds

    async def wake(
        self,
        session: aiohttp.ClientSession,
        model_id: str,
        base: str,
        setting: SleepSetting,
        health_url: str | None,
        health_timeout: float,
        exited: asyncio.Future[Any],
        probe: WakeProbe | None = None,
        where: tuple[Collection[int] | None, Collection[str] | None, Collection[int]] = (
            None,
            None,
            (),
        ),
    ) -> float:
        """Send the wake calls (`sleep: cuda`: restore and unlock its processes, `where` as a
        sleep's), then wait for the health check, then ask the `probe`; the seconds the calls and
        the health check took. Raises `WakeFailed` (`WakeUnverified` when the probe got no
        answer, or not the one it must give)."""
        facts = self.of(model_id)
        began = time.monotonic()
        if setting.method is SleepMethod.CUDA:
            backend = None if isinstance(self.backend, NullBackend) else self.backend
            try:
                await self.cuda.wake_model(
                    model_id, backend, where, facts.held_before, CONTEXT_BYTES
                )
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
        if probe is not None:
            await self._verify(session, model_id, base, probe, facts)
        facts.last_wake_s = seconds
        facts.wakes += 1
        facts.residual = {}
        self._marked(model_id, None)
        log.info("%s awake in %.2fs", model_id, seconds)
        return seconds

    async def _record(
        self,
        session: aiohttp.ClientSession,
        model_id: str,
        base: str,
        probe: WakeProbe,
        facts: SleepFacts,
    ) -> None:
        """Keep the probe's answer before the process's first sleep (None: it gave none)."""
        began = time.monotonic()
        try:
            facts.probe_answer = await wake_probe.record(session, model_id, base, probe)
        finally:
            self.on_phase(model_id, SwapPhase.VERIFY, time.monotonic() - began)

    async def _verify(
        self,
        session: aiohttp.ClientSession,
        model_id: str,
        base: str,
        probe: WakeProbe,
        facts: SleepFacts,
    ) -> None:
        """Ask the probe after a wake. Raises `WakeUnverified`."""
        if not wake_probe.can_check(model_id, probe, facts.probe_answer):
            return
        began = time.monotonic()
        try:
            await wake_probe.check(session, model_id, base, probe, facts.probe_answer)
        except WakeUnverified as exc:
            facts.last_failure = exc.message
            raise
        finally:
            self.on_phase(model_id, SwapPhase.VERIFY, time.monotonic() - began)
        facts.verified += 1

    def forget(self, model_id: str) -> None:
        """Its process stopped: it holds nothing asleep any more (the durations stay)."""
        facts = self.facts.get(model_id)
        if facts is not None:
            facts.residual = {}
            facts.probe_answer = facts.probe_pid = None  # the next process records its own
        self.cuda.forget(model_id)
        self._marked(model_id, None)
