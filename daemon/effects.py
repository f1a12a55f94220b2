"""The scheduler's `Effects`, done by the process machinery. Each is told everything it needs (the
model, its handle, whether a start follows) and reads nothing of the scheduler's state."""

from __future__ import annotations

from collections.abc import Callable

from ..ipc.messages import Draining, ModelStatus, StateChanged
from .config import ModelConfig
from .endpoint import Endpoint
from .machinery.exit_watch import ExitWatch
from .machinery.lifecycle import Lifecycle
from .machinery.model_process import Running
from .policy.proxies import ProxyRegistry
from .policy.records import ModelRecord

StatusOf = Callable[[ModelRecord[Running], ModelConfig | None], ModelStatus]


class DaemonEffects:
    def __init__(
        self,
        lifecycle: Lifecycle,
        registry: ProxyRegistry,
        endpoint: Endpoint,
        exits: ExitWatch,
        status_of: StatusOf,
    ) -> None:
        self.lifecycle = lifecycle
        self.registry = registry
        self.endpoint = endpoint
        self.exits = exits
        self.status_of = status_of

    async def start(self, model: ModelConfig) -> Running:
        running = await self.lifecycle.start(model)
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

        await self.registry.drain(model_id, publish)

    def busy(self, model_id: str) -> bool:
        return self.registry.in_flight(model_id) > 0

    async def stop(
        self, model_id: str, handle: Running, model: ModelConfig | None, *, start_follows: bool
    ) -> None:
        self.exits.unwatch(model_id)
        # A swap starts its target right after: the watcher's `rm` waits until that has spawned.
        await self.lifecycle.stop(handle, model, defer_remove=start_follows)

    def changed(self, record: ModelRecord[Running], model: ModelConfig | None) -> None:
        status = self.status_of(record, model)
        instance = self.endpoint.instance
        self.endpoint.publish_nowait(
            lambda seq: StateChanged(instance=instance, seq=seq, status=status)
        )
