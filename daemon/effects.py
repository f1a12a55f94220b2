"""The scheduler's `Effects`, done by the process machinery, and what observes them. Each effect is
told everything it needs (the model, its handle, whether a start follows, the eviction policy's
decision) and reads nothing of the scheduler's state.

* `StatePublisher` publishes each model's state (`StateChanged`) and keeps the last one;
* `Phases` takes how long each phase of a start or a stop took (to the metrics and, as the
  episode's `PhaseDone`, the swap log); a start's spawn also says that the health check began
  (the starting model's `starting` step, and its reason);
* `DaemonEffects` starts, drains, stops, puts to sleep and wakes models, publishes their states,
  counts, and carries out
  what the eviction policy decided that is not the scheduler's: the busy models a swap waits for,
  shown on the busy board (and logged there); a placement by memory, booked in the GPU ledger.
  What happens in a model's swap story (`policy/story.py`) goes to the swap log. What a queued
  swap waits for goes to the swap log too, and when that changes, its target's status is
  published again once the decision under way returned (once per turn of the loop, and not at
  all when a state change published meanwhile carried it): never from inside a decision.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import msgspec

from ..ipc.messages import Draining, StateChanged
from ..ipc.model_status import ModelStatus
from ..ipc.routing_table import SleepSetting
from ..ipc.states import HEALTH_CHECK_REASON, ModelState, StartStep
from ..ipc.swap_record import SwapPhase
from .config import ModelConfig
from .endpoint import Endpoint
from .errors import DaemonError, WakeUnverified
from .gpu_ledger import GpuLedger
from .machinery.exit_watch import ExitWatch
from .machinery.lifecycle import Lifecycle
from .machinery.model_process import Running
from .observe.metrics import Metrics
from .observe.swap_log import SwapLog
from .policy.busy_board import BusyBoard
from .policy.eviction.contract import Decision, Wait
from .policy.proxies import ProxyRegistry
from .policy.records import ModelRecord
from .policy.scheduler import BACKOFF_AFTER
from .policy.story import Happening, PhaseDone

StatusOf = Callable[[ModelRecord[Running], ModelConfig | None], ModelStatus]


class StatePublisher:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        # The last status published per model: a phase change republishes it with a new reason.
        self._last: dict[str, ModelStatus] = {}

    def publish(self, status: ModelStatus) -> None:
        self._last[status.model] = status
        instance = self.endpoint.instance
        self.endpoint.publish_nowait(
            lambda seq: StateChanged(instance=instance, seq=seq, status=status)
        )

    def health_check_began(self, model_id: str) -> None:
        last = self._last.get(model_id)
        if last is not None and last.state == ModelState.STARTING:
            self.publish(
                msgspec.structs.replace(
                    last, reason=HEALTH_CHECK_REASON, starting=StartStep.HEALTH_CHECK
                )
            )


class Phases:
    def __init__(self, metrics: Metrics, swap_log: SwapLog, publisher: StatePublisher) -> None:
        self.metrics = metrics
        self.swap_log = swap_log
        self.publisher = publisher

    def record(self, model_id: str, phase: SwapPhase, seconds: float) -> None:
        self.metrics.phase.labels(model_id, phase.value).observe(seconds)
        self.swap_log.told(PhaseDone(model_id, phase, seconds))
        if phase is SwapPhase.START:
            self.publisher.health_check_began(model_id)


class DaemonEffects:
    def __init__(
        self,
        lifecycle: Lifecycle,
        registry: ProxyRegistry,
        exits: ExitWatch,
        *,
        publisher: StatePublisher,
        status_of: StatusOf,
        phases: Phases,
        metrics: Metrics,
        swap_log: SwapLog,
        board: BusyBoard,
        ledger: GpuLedger | None,
        republish: Callable[[str], None],
    ) -> None:
        self.lifecycle = lifecycle
        self.registry = registry
        self.exits = exits
        self.publisher = publisher
        self.status_of = status_of
        self.phases = phases
        self.metrics = metrics
        self.swap_log = swap_log
        self.board = board
        self.ledger = ledger
        # Publishes a model's status again (what a swap to it waits for changed).
        self.republish = republish
        # The models whose status is due to be published again (`_publish_soon`).
        self._due: set[str] = set()

    async def start(self, model: ModelConfig) -> Running:
        try:
            running = await self.lifecycle.start(model)
        except Exception:
            self.metrics.starts.labels(model.id, "failed").inc()
            raise
        self.metrics.starts.labels(model.id, "ok").inc()
        self.exits.watch(model.id, running.pid)
        return running

    async def drain(self, model_id: str) -> None:
        endpoint = self.publisher.endpoint

        async def publish(epoch: int) -> None:
            await endpoint.publish(
                lambda seq: Draining(
                    instance=endpoint.instance, seq=seq, model=model_id, epoch=epoch
                )
            )

        began = time.monotonic()
        await self.registry.drain(model_id, publish)
        self.phases.record(model_id, SwapPhase.DRAIN, time.monotonic() - began)

    async def stop(
        self, model_id: str, handle: Running, model: ModelConfig | None, *, start_follows: bool
    ) -> None:
        self.exits.unwatch(model_id)
        began = time.monotonic()
        # A swap starts its target right after: the watcher's `rm` waits until that has spawned.
        await self.lifecycle.stop(handle, model, defer_remove=start_follows)
        self.phases.record(model_id, SwapPhase.STOP, time.monotonic() - began)
        if start_follows:
            self.metrics.swaps.labels(model_id).inc()

    async def sleep(
        self, model_id: str, handle: Running, model: ModelConfig | None, setting: SleepSetting
    ) -> None:
        try:
            seconds = await self.lifecycle.sleep(handle, model, setting)
        except DaemonError:
            self.metrics.sleeps.labels(model_id, "failed").inc()
            raise
        self.metrics.sleeps.labels(model_id, "ok").inc()
        self.phases.record(model_id, SwapPhase.SLEEP, seconds)
        if self.ledger is not None:
            # Asleep it holds its residual, as read; its run's reservation is over.
            self.ledger.forget(model_id)

    async def wake(
        self, model_id: str, handle: Running, model: ModelConfig | None, setting: SleepSetting
    ) -> None:
        try:
            seconds = await self.lifecycle.wake(handle, model, setting)
        except asyncio.CancelledError:
            # As a cancelled start: leave no half-woken process behind (unless the daemon stops
            # alone, when the next one adopts it).
            if not self.lifecycle.detached:
                await asyncio.shield(self.stop(model_id, handle, model, start_follows=False))
            raise
        except DaemonError as exc:
            result = "unverified" if isinstance(exc, WakeUnverified) else "failed"
            self.metrics.wakes.labels(model_id, result).inc()
            raise
        self.metrics.wakes.labels(model_id, "ok").inc()
        self.phases.record(model_id, SwapPhase.WAKE, seconds)

    def changed(self, record: ModelRecord[Running], model: ModelConfig | None) -> None:
        if record.state == ModelState.FAILED and record.failures >= BACKOFF_AFTER:
            self.metrics.backoffs.labels(record.id).inc()
        stop = record.stop
        if record.state == ModelState.STOPPED and stop is not None:
            self.metrics.stops.labels(record.id, stop.cause).inc()
        # Its status now, what a swap to it waits for included: no republish is due any more.
        self._due.discard(record.id)
        self.publisher.publish(self.status_of(record, model))

    def happened(self, event: Happening) -> None:
        # Told after the state change it goes with: a record follows what it records.
        self.swap_log.told(event)

    # ----------------------------------------------------------------------- what was decided

    def decided(self, target: ModelConfig, decision: Decision) -> None:
        self.board.waits(target.id, decision.holding if isinstance(decision, Wait) else {})
        if self.ledger is not None:
            self.ledger.book(target, decision)

    def waiting(self, target: str, on: str, queued_at: float) -> None:
        since = time.time() - (time.monotonic() - queued_at)
        if self.swap_log.waiting(target, on, since):
            self._publish_soon(target)

    def ended(self, target: str) -> None:
        self.board.waits_over(target)
        if self.swap_log.swap_ended(target):
            self._publish_soon(target)

    def _publish_soon(self, model_id: str) -> None:
        """Publish the model's status again once the decision under way returned: the
        scheduler tells `waiting` from inside a decision, which must not publish through the
        daemon (that reads the scheduler's state back) before it is done."""
        if not self._due:
            asyncio.get_running_loop().call_soon(self._publish_due)
        self._due.add(model_id)

    def _publish_due(self) -> None:
        due, self._due = self._due, set()
        for model_id in sorted(due):
            self.republish(model_id)
