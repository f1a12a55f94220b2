"""The scheduler's `Effects`, done by the process machinery, and what observes them. Each effect is
told everything it needs (the model, its handle, whether a start follows, the eviction policy's
decision) and reads nothing of the scheduler's state.

* `StatePublisher` publishes each model's state (`StateChanged`) and keeps the last one;
* `Phases` takes how long each phase of a start or a stop took (to the metrics and the swap log);
  a start's spawn also says that the health check began (the starting model's reason);
* `DaemonEffects` starts, drains, stops, puts to sleep and wakes models, publishes their states,
  counts, and carries out
  what the eviction policy decided that is not the scheduler's: the busy models a swap waits for,
  shown on the busy board (and logged there); a placement by memory, booked in the GPU ledger.
  What a queued swap waits for goes to the swap log, and its target's status is published again
  when that changes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import msgspec

from ..ipc.causes import DeferCause
from ..ipc.messages import Draining, StateChanged
from ..ipc.model_status import ModelStatus
from ..ipc.routing_table import SleepSetting
from ..ipc.states import HEALTH_CHECK_REASON, ModelState
from .config import ModelConfig
from .endpoint import Endpoint
from .errors import DaemonError
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
            self.publish(msgspec.structs.replace(last, reason=HEALTH_CHECK_REASON))


class Phases:
    def __init__(self, metrics: Metrics, swap_log: SwapLog, publisher: StatePublisher) -> None:
        self.metrics = metrics
        self.swap_log = swap_log
        self.publisher = publisher

    def record(self, model_id: str, phase: str, seconds: float) -> None:
        """(model id, "drain", "stop", "start", "health", "sleep" or "wake", seconds)."""
        self.metrics.phase.labels(model_id, phase).observe(seconds)
        self.swap_log.phase(model_id, phase, seconds)
        if phase == "start":
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
        self.phases.record(model_id, "drain", time.monotonic() - began)

    async def stop(
        self, model_id: str, handle: Running, model: ModelConfig | None, *, start_follows: bool
    ) -> None:
        self.exits.unwatch(model_id)
        began = time.monotonic()
        # A swap starts its target right after: the watcher's `rm` waits until that has spawned.
        await self.lifecycle.stop(handle, model, defer_remove=start_follows)
        self.phases.record(model_id, "stop", time.monotonic() - began)
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
        self.phases.record(model_id, "sleep", seconds)
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
        except DaemonError:
            self.metrics.wakes.labels(model_id, "failed").inc()
            raise
        self.metrics.wakes.labels(model_id, "ok").inc()
        self.phases.record(model_id, "wake", seconds)

    def changed(self, record: ModelRecord[Running], model: ModelConfig | None) -> None:
        if record.state == ModelState.FAILED and record.failures >= BACKOFF_AFTER:
            self.metrics.backoffs.labels(record.id).inc()
        stop = record.stop
        if record.state == ModelState.STOPPED and stop is not None:
            self.metrics.stops.labels(record.id, stop.cause).inc()
        self.publisher.publish(self.status_of(record, model))
        # After the state event: a record follows what it records.
        self.swap_log.changed(
            record.id,
            record.state,
            record.reason,
            cause=stop.cause if stop is not None else None,
            for_model=stop.for_model if stop is not None else "",
            adopted=record.adopted,
        )

    # ----------------------------------------------------------------------- what was decided

    def decided(self, target: ModelConfig, decision: Decision) -> None:
        self.board.waits(target.id, decision.holding if isinstance(decision, Wait) else {})
        if self.ledger is not None:
            self.ledger.book(target, decision)

    def waiting(
        self, target: str, on: str, queued_at: float, deferred: DeferCause | None = None
    ) -> None:
        since = time.time() - (time.monotonic() - queued_at)
        if self.swap_log.waiting(target, on, since, deferred):
            self.republish(target)

    def ended(self, target: str) -> None:
        self.board.waits_over(target)
        if self.swap_log.swap_ended(target):
            self.republish(target)
