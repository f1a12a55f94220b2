"""The scheduler without processes: model configs, a fake `Effects` that logs every call and can
hold starts and drains open with gates, a settable clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from swapd.daemon.config import Config, GroupConfig, ModelConfig
from swapd.daemon.policy.scheduler import EnsureError, ModelRecord, Scheduler
from tests.support.models import Clock, model


def make_config(*ids: str, groups: dict[str, GroupConfig] | None = None, **kw: Any) -> Config:
    return Config(models={m: model(m, **kw.get(m, {})) for m in ids}, groups=groups or {})


@dataclass
class Handle:
    upstream: str
    pid: int


class StartError(EnsureError):
    """Like `lifecycle.StartFailed`: an `EnsureError` that carries the log tail."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=502, code="start_failed", log_tail=("line 1", "line 2"))


class FakeEffects:
    """Stands for the daemon's process machinery; every call is logged, and starts/drains can be
    held open with gates to create overlaps."""

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

    async def start(self, m: ModelConfig) -> Handle:
        self.log.append(("start", m.id))
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
        self.log.append(("drain", model_id))
        gate = self.drain_gates.get(model_id)
        if gate is not None:
            await gate.wait()
        hook = self.drain_hooks.pop(model_id, None)
        if hook is not None:
            hook()

    def busy(self, model_id: str) -> bool:
        return model_id in self.busy_models

    async def stop(
        self, model_id: str, handle: Handle, m: ModelConfig | None, *, start_follows: bool
    ) -> None:
        self.log.append(("stop", model_id))
        self.told.append((model_id, start_follows))
        self.running.discard(model_id)

    def changed(self, record: ModelRecord[Handle], model: ModelConfig | None) -> None:
        self.states.append((record.id, record.state))


def setup(*ids: str, **kw: Any) -> tuple[Scheduler, FakeEffects, Clock]:
    config = make_config(*ids, **kw)
    effects = FakeEffects(config)
    clock = Clock()
    return Scheduler(config, effects, clock=clock, backoff_base=5.0), effects, clock


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)
