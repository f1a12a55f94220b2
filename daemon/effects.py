"""The scheduler's `Effects`, done by the process machinery. Each is told everything it needs (the
model, its handle, whether a start follows) and reads nothing of the scheduler's state."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from ..ipc.messages import Draining, StateChanged
from ..ipc.model_status import ModelStatus
from ..ipc.states import HEALTH_CHECK_REASON
from .config import ModelConfig
from .endpoint import Endpoint
from .machinery.exit_watch import ExitWatch
from .machinery.lifecycle import Lifecycle
from .machinery.model_process import Running
from .observe.metrics import Metrics
from .observe.swap_log import SwapLog
from .policy.proxies import ProxyRegistry
from .policy.records import ModelRecord
from .policy.swaps import BACKOFF_AFTER

StatusOf = Callable[[ModelRecord[Running], ModelConfig | None], ModelStatus]


class DaemonEffects:
    def __init__(
        self,
        lifecycle: Lifecycle,
        registry: ProxyRegistry,
        endpoint: Endpoint,
        exits: ExitWatch,
        status_of: StatusOf,
        metrics: Metrics | None = None,
        swaps: SwapLog | None = None,
    ) -> None:
        self.lifecycle = lifecycle
        self.registry = registry
        self.endpoint = endpoint
        self.exits = exits
        self.status_of = status_of
        self.metrics = metrics or Metrics()
        self.swaps = swaps
        lifecycle.on_phase = self._phase
        # The last status published per model: a phase change republishes it with a new reason.
        self._last: dict[str, ModelStatus] = {}

    def _phase(self, model_id: str, phase: str, seconds: float) -> None:
        self.metrics.phase.labels(model_id, phase).observe(seconds)
        if self.swaps is not None:
            self.swaps.phase(model_id, phase, seconds)
        last = self._last.get(model_id)
        if phase == "start" and last is not None and last.state == "starting":
            self._publish(msgspec.structs.replace(last, reason=HEALTH_CHECK_REASON))

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
        endpoint = self.endpoint

        async def publish(epoch: int) -> None:
            await endpoint.publish(
                lambda seq: Draining(
                    instance=endpoint.instance, seq=seq, model=model_id, epoch=epoch
                )
            )

        began = time.monotonic()
        await self.registry.drain(model_id, publish)
        self._phase(model_id, "drain", time.monotonic() - began)

    def busy(self, model_id: str) -> bool:
        return self.registry.in_flight(model_id) > 0

    async def stop(
        self, model_id: str, handle: Running, model: ModelConfig | None, *, start_follows: bool
    ) -> None:
        self.exits.unwatch(model_id)
        began = time.monotonic()
        # A swap starts its target right after: the watcher's `rm` waits until that has spawned.
        await self.lifecycle.stop(handle, model, defer_remove=start_follows)
        self._phase(model_id, "stop", time.monotonic() - began)
        if start_follows:
            self.metrics.swaps.labels(model_id).inc()

    def changed(self, record: ModelRecord[Running], model: ModelConfig | None) -> None:
        if record.state == "failed" and record.failures >= BACKOFF_AFTER:
            self.metrics.backoffs.labels(record.id).inc()
        self._publish(self.status_of(record, model))
        if self.swaps is not None:  # after the state event: a record follows what it records
            self.swaps.changed(record.id, record.state, record.reason)

    def _publish(self, status: ModelStatus) -> None:
        self._last[status.model] = status
        instance = self.endpoint.instance
        self.endpoint.publish_nowait(
            lambda seq: StateChanged(instance=instance, seq=seq, status=status)
        )
