"""The scheduler without processes: model configs, a fake `Effects` (and `Readings`) that logs
every call and can hold starts and drains open with gates, a settable clock, and the waits that
replace sleeping: for a call to reach the fake (`FakeEffects.entered`), for a swap to wait
(`parked`), or for any condition (`until`), each with a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from swapd.daemon.config import Config, GroupConfig, ModelConfig
from swapd.daemon.errors import SleepFailed, WakeFailed, WakeUnverified
from swapd.daemon.policy.eviction.contract import (
    BusyReading,
    Decision,
    GpuRoom,
    Occupant,
)
from swapd.daemon.policy.records import Activity, ModelRecord, Parked
from swapd.daemon.policy.scheduler import EnsureError, Scheduler
from swapd.daemon.policy.story import Deferred, Happening
from swapd.ipc.causes import DeferCause
from swapd.ipc.routing_table import SleepSetting
from tests.support.models import Clock, model

DEADLINE = 10.0


def make_config(*ids: str, groups: dict[str, GroupConfig] | None = None, **kw: Any) -> Config:
    return Config(models={m: model(m, **kw.get(m, {})) for m in ids}, groups=groups or {})


@dataclass
class Handle:
    upstream: str
    pid: int
    started_at: float = 0.0


class StartError(EnsureError):
    """Like `lifecycle.StartFailed`: an `EnsureError` that carries the log tail."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=502, code="start_failed", log_tail=("line 1", "line 2"))


class FakeEffects:
    """Stands for the daemon's process machinery and for what it reads of the proxies, the busy
    checks and the GPUs; every call is logged, and starts/drains can be held open with gates to
    create overlaps."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.log: list[tuple[str, str]] = []
        self.start_gates: dict[str, asyncio.Event] = {}
        self.drain_gates: dict[str, asyncio.Event] = {}
        self.fail: set[str] = set()
        self.running: set[str] = set()
        self.max_running = 0
        self.pid = 100
        self.states: list[tuple[str, str]] = []
        self.told: list[tuple[str, bool]] = []  # (model, start_follows) of every stop
        self.busy_models: set[str] = set()  # what the proxies report as in flight
        # Called as a drain ends (its last step, before the drain task is done).
        self.drain_hooks: dict[str, Callable[[], object]] = {}
        self.decisions: list[tuple[str, Decision]] = []
        self.waits: list[tuple[str, str]] = []  # (target, what its swap waits for) as told
        self.happenings: list[Happening] = []  # the swap story as told (policy/story.py)
        # Set once a call of that kind for that model reached the fake (before any gate).
        self._entered: dict[tuple[str, str], asyncio.Event] = {}
        # Readings: what each busyCheck says; the GPU reading (None: no GPUs to read).
        self.busy_readings: dict[str, BusyReading] = {}
        self.checked: list[frozenset[str]] = []
        self.gpu_room: Callable[[ModelConfig, Sequence[Occupant]], GpuRoom] | None = None
        # Sleeps and wakes: held open with gates, failed on demand, and who is asleep now.
        self.sleep_gates: dict[str, asyncio.Event] = {}
        self.wake_gates: dict[str, asyncio.Event] = {}
        self.sleep_fails: set[str] = set()
        self.wake_fails: set[str] = set()
        self.wake_unverified: set[str] = set()  # woken, but its wakeProbe answered wrongly
        self.asleep: set[str] = set()
        self.readings_seen: list[tuple[str, tuple[str, ...]]] = []  # (target, occupants read)
        # Each model's swap-in cost as the swap log would say it (absent: not known yet).
        self.load_costs: dict[str, float] = {}
        self.wake_costs: dict[str, float] = {}
        self.parks: list[tuple[str, Parked]] = []  # (target, why its swap waits) as told

    def _enter(self, kind: str, model_id: str) -> None:
        self.log.append((kind, model_id))
        self._entry(kind, model_id).set()

    def _entry(self, kind: str, model_id: str) -> asyncio.Event:
        return self._entered.setdefault((kind, model_id), asyncio.Event())

    async def entered(self, kind: str, model_id: str) -> None:
        """Until a `kind` ("start", "drain", "stop", "sleep", "wake") call for `model_id` reached
        the fake."""
        await asyncio.wait_for(self._entry(kind, model_id).wait(), DEADLINE)

    # -------------------------------------------------------------------------------- effects

    async def start(self, m: ModelConfig) -> Handle:
        self._enter("start", m.id)
        assert m.id not in self.running, f"{m.id} started twice"
        self.running.add(m.id)
        self.max_running = max(self.max_running, len(self.running))
        gate = self.start_gates.get(m.id)
        if gate is not None:
            try:
                await gate.wait()
            except asyncio.CancelledError:
                # As lifecycle.start does: a cancelled start stops the process it started.
                self.log.append(("cancel", m.id))
                self.running.discard(m.id)
                raise
        if m.id in self.fail:
            self.running.discard(m.id)
            raise StartError(f"{m.id} exited during startup with exit code 3")
        self.pid += 1
        return Handle(m.proxy, self.pid)

    async def drain(self, model_id: str) -> None:
        self._enter("drain", model_id)
        gate = self.drain_gates.get(model_id)
        if gate is not None:
            await gate.wait()
        hook = self.drain_hooks.pop(model_id, None)
        if hook is not None:
            hook()

    async def stop(
        self,
        model_id: str,
        handle: Handle,
        m: ModelConfig | None,
        *,
        start_follows: bool,
        save: bool = False,
    ) -> None:
        self._enter("stop", model_id)
        self.told.append((model_id, start_follows))
        self.running.discard(model_id)
        self.asleep.discard(model_id)

    async def sleep(
        self, model_id: str, handle: Handle, m: ModelConfig | None, setting: SleepSetting
    ) -> None:
        self._enter("sleep", model_id)
        gate = self.sleep_gates.get(model_id)
        if gate is not None:
            await gate.wait()
        if model_id in self.sleep_fails:
            raise SleepFailed(f"sleep call 1/1 POST {setting.sleep[0].endpoint} answered 500")
        self.running.discard(model_id)
        self.asleep.add(model_id)

    async def wake(
        self, model_id: str, handle: Handle, m: ModelConfig | None, setting: SleepSetting
    ) -> None:
        self._enter("wake", model_id)
        assert model_id in self.asleep, f"{model_id} woken while not asleep"
        gate = self.wake_gates.get(model_id)
        if gate is not None:
            try:
                await gate.wait()
            except asyncio.CancelledError:
                # As the daemon's effects do: a cancelled wake stops its process.
                self.log.append(("cancel", model_id))
                self.asleep.discard(model_id)
                raise
        if model_id in self.wake_fails:
            raise WakeFailed("wake call 1/1 POST /wake_up did not answer within 10s")
        if model_id in self.wake_unverified:
            raise WakeUnverified("its wakeProbe mismatch: answered 'x', not 'y' as before")
        self.asleep.discard(model_id)
        self.running.add(model_id)
        self.max_running = max(self.max_running, len(self.running))

    def changed(self, record: ModelRecord[Handle], model: ModelConfig | None) -> None:
        self.states.append((record.id, record.state))

    def happened(self, event: Happening) -> None:
        self.happenings.append(event)

    def decided(self, target: ModelConfig, decision: Decision) -> None:
        self.decisions.append((target.id, decision))

    def waiting(self, target: str, on: str, queued_at: float, parked: Parked | None = None) -> None:
        self.waits.append((target, on))
        if parked is not None:
            self.parks.append((target, parked))

    @property
    def deferred(self) -> list[tuple[str, DeferCause]]:
        """(target, why its swap was held back), as the story told it."""
        return [(e.model, e.cause) for e in self.happenings if isinstance(e, Deferred)]

    def ended(self, target: str) -> None:
        pass

    # ------------------------------------------------------------------------------- readings

    def activity(self, model_id: str) -> Activity:
        return Activity(in_flight=model_id in self.busy_models)

    def busy(self, model_id: str) -> BusyReading | None:
        return self.busy_readings.get(model_id)

    async def check_busy(self, models: frozenset[str]) -> None:
        self.checked.append(models)

    def swap_in_cost(self, model_id: str, *, waking: bool) -> float | None:
        return (self.wake_costs if waking else self.load_costs).get(model_id)

    async def gpus(self, target: ModelConfig, occupants: Sequence[Occupant]) -> GpuRoom:
        assert self.gpu_room is not None, "a GPU reading without GPUs"
        self.readings_seen.append((target.id, tuple(o.id for o in occupants)))
        return self.gpu_room(target, occupants)


def setup(*ids: str, **kw: Any) -> tuple[Scheduler[Handle], FakeEffects, Clock]:
    config = make_config(*ids, **kw)
    effects = FakeEffects(config)
    clock = Clock()
    scheduler: Scheduler[Handle] = Scheduler(
        config, effects, effects, clock=clock, backoff_base=5.0
    )
    return scheduler, effects, clock


async def until(predicate: Callable[[], object], what: str, timeout: float = DEADLINE) -> None:
    """Until `predicate()` holds, looking again at every turn of the loop; fails after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    turns = 0
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        turns += 1
        # Every turn of the loop at first; then gently, for what waits on a timer.
        await asyncio.sleep(0 if turns < 1000 else 0.002)


async def parked(scheduler: Scheduler[Handle], target: str) -> str:
    """Until the swap to `target` waits (its decision made: it does not go on now); what it
    waits for."""
    await until(lambda: scheduler.waiting(target), f"the swap to {target} to wait")
    return scheduler.waiting(target)
