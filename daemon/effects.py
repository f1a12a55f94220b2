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
import logging
import time
from collections.abc import Callable

import msgspec

from ..ipc.activity import ActivityRecord
from ..ipc.messages import Draining, StateChanged
from ..ipc.model_status import ModelStatus
from ..ipc.routing_table import SleepSetting
from ..ipc.states import HEALTH_CHECK_REASON, KV_RESTORE_REASON, ModelState, StartStep
from ..ipc.swap_record import SwapPhase
from .config import ModelConfig
from .endpoint import Endpoint
from .errors import DaemonError, WakeUnverified
from .gpu_ledger import GpuLedger
from .machinery.exit_watch import ExitWatch
from .machinery.kv_slots import KvFailed, KvSlots
from .machinery.lifecycle import Lifecycle
from .machinery.model_process import Running
from .observe.metrics import Metrics
from .observe.swap_log import SwapLog, WaitWhy
from .policy.busy_board import BusyBoard
from .policy.eviction.contract import Decision, Wait
from .policy.proxies import ProxyRegistry
from .policy.records import ModelRecord, Parked
from .policy.scheduler import BACKOFF_AFTER
from .policy.story import Happening, PhaseDone

log = logging.getLogger("swapd.kv")

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

    def kv_restore_began(self, model_id: str) -> None:
        last = self._last.get(model_id)
        if last is not None and last.state in (ModelState.STARTING, ModelState.WAKING):
            step = StartStep.KV_RESTORE if last.state == ModelState.STARTING else None
            self.publish(msgspec.structs.replace(last, reason=KV_RESTORE_REASON, starting=step))

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

    def record(self, model_id: str, phase: SwapPhase, seconds: float, moved: int = 0) -> None:
        self.metrics.phase.labels(model_id, phase.value).observe(seconds)
        if moved:
            self.metrics.kv_bytes.labels(model_id, phase.value).inc(moved)
        self.swap_log.told(PhaseDone(model_id, phase, seconds, moved))
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
        kv: KvSlots | None = None,
    ) -> None:
        self.lifecycle = lifecycle
        # The models' conversation caches (`kvCache`), saved before a stop or sleep, restored
        # after a start or wake.
        self.kv = kv if kv is not None else KvSlots()
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
        await self._restoring(running, model)
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
        self,
        model_id: str,
        handle: Running,
        model: ModelConfig | None,
        *,
        start_follows: bool,
        save: bool = False,
    ) -> None:
        if save:
            await self._kv_save(model_id, handle, model)
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
        await self._kv_save(model_id, handle, model)
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
        if model is not None:
            await self._restoring(handle, model)

    # ----------------------------------------------------------------- conversation caches

    async def _kv_save(self, model_id: str, handle: Running, model: ModelConfig | None) -> None:
        """Save its conversation caches (`kvCache`) before its process goes: never fails the
        stop or the sleep, and never takes longer than the setting's timeout."""
        if model is None or model.kv_cache is None:
            return
        if self.kv.quick(model_id):
            log.info("%s: not saving its conversation caches (swapd unload --now)", model_id)
            return
        try:
            moved = await self.kv.save(self.lifecycle.session, handle.upstream, model)
        except KvFailed as exc:
            log.warning("%s: its conversation caches were not saved: %s", model_id, exc)
            self.metrics.kv_saves.labels(model_id, "failed").inc()
            return
        self.metrics.kv_saves.labels(model_id, "ok").inc()
        self.phases.record(model_id, SwapPhase.KV_SAVE, moved.seconds, moved.bytes)
        if moved.slots:
            log.info(
                "%s: saved slots %s (%d tokens, %d bytes) in %.3fs",
                model_id,
                ",".join(map(str, moved.slots)),
                moved.tokens,
                moved.bytes,
                moved.seconds,
            )

    async def _restoring(self, running: Running, model: ModelConfig) -> None:
        """Restore its conversation caches after its start or wake, before the first request;
        a cancelled restore (an unload) leaves no process behind, as a cancelled start."""
        try:
            await self._kv_restore(running, model)
        except asyncio.CancelledError:
            if not self.lifecycle.detached:
                await asyncio.shield(self.stop(model.id, running, model, start_follows=False))
            raise

    async def _kv_restore(self, running: Running, model: ModelConfig) -> None:
        manifest = self.kv.saved(model)
        if manifest is None:
            return
        self.publisher.kv_restore_began(model.id)
        try:
            moved = await self.kv.restore(self.lifecycle.session, running.upstream, model, manifest)
        except KvFailed as exc:
            log.warning("%s: its conversation caches were not restored: %s", model.id, exc)
            self.metrics.kv_restores.labels(model.id, "failed").inc()
            return
        self.metrics.kv_restores.labels(model.id, "ok").inc()
        if moved.tokens < manifest.tokens:
            self.metrics.kv_restores.labels(model.id, "short").inc()
        self.phases.record(model.id, SwapPhase.KV_RESTORE, moved.seconds, moved.bytes)
        log.info(
            "%s: restored slots %s (%d of %d tokens) in %.3fs",
            model.id,
            ",".join(map(str, moved.slots)),
            moved.tokens,
            manifest.tokens,
            moved.seconds,
        )

    def answered(self, records: list[ActivityRecord]) -> None:
        """Answered requests: the first one after a restore tells what it reused."""
        for model_id in self.kv.answered(records):
            self.metrics.kv_restores.labels(model_id, "short").inc()

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

    def waiting(self, target: str, on: str, queued_at: float, parked: Parked | None = None) -> None:
        offset = time.time() - time.monotonic()
        since = queued_at + offset
        why = None
        if parked is not None:
            until = parked.at_latest + offset if parked.at_latest is not None else 0.0
            why = WaitWhy(parked.cause, parked.serving, until)
        if self.swap_log.waiting(target, on, since, why):
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
