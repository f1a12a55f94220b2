"""The daemon's effects (daemon/effects.py) publish what a queued swap waits for after the
decision that said it, never from inside it: the scheduler tells `waiting` mid-decision, and the
target's status is published again on the loop's next turn, once however often it changed, and
not at all when a state change published meanwhile carried it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from swapd.daemon.effects import DaemonEffects, Phases, StatePublisher
from swapd.daemon.observe.metrics import Metrics
from swapd.daemon.observe.swap_log import SwapLog
from swapd.daemon.policy.busy_board import BusyBoard
from swapd.daemon.policy.records import ModelRecord
from swapd.ipc.messages import Event, StateChanged
from swapd.ipc.model_status import ModelStatus
from swapd.ipc.states import HEALTH_CHECK_REASON, ModelState, StartStep
from swapd.ipc.swap_record import SwapPhase


class _Endpoint:
    instance = "inst"

    def __init__(self) -> None:
        self.events: list[Event] = []

    def publish_nowait(self, make: Callable[[int], Event]) -> None:
        self.events.append(make(len(self.events) + 1))

    def reply(self, identity: bytes, reply: Any) -> None:
        return None


def effects() -> tuple[DaemonEffects, list[str], _Endpoint, SwapLog]:
    endpoint = _Endpoint()
    republished: list[str] = []
    metrics = Metrics()
    swaps = SwapLog("inst", endpoint)
    publisher = StatePublisher(endpoint)  # type: ignore[arg-type]
    made = DaemonEffects(
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        publisher=publisher,
        status_of=lambda rec, _model: ModelStatus(model=rec.id, state=rec.state),
        phases=Phases(metrics, swaps, publisher),
        metrics=metrics,
        swap_log=swaps,
        board=BusyBoard(),
        ledger=None,
        republish=republished.append,
    )
    return made, republished, endpoint, swaps


async def test_what_a_swap_waits_for_is_published_after_the_decision_once() -> None:
    fx, republished, _, swaps = effects()
    now = time.monotonic()
    fx.waiting("b", "busy: a", now)
    fx.waiting("b", "behind the swap to c in the queue", now)
    assert republished == []  # not from inside the decision
    assert swaps.waiting_now("b") is not None  # what its status shows is there already
    await asyncio.sleep(0)  # the loop's next turn
    assert republished == ["b"]
    fx.ended("b")
    await asyncio.sleep(0)
    assert republished == ["b", "b"]


async def test_a_state_change_published_meanwhile_carries_it() -> None:
    fx, republished, endpoint, _ = effects()
    fx.waiting("b", "busy: a", time.monotonic())
    fx.changed(ModelRecord("b", state=ModelState.STARTING), None)
    await asyncio.sleep(0)
    assert republished == []
    assert [e.status.model for e in endpoint.events if isinstance(e, StateChanged)] == ["b"]


async def test_the_spawn_tells_the_health_check_as_a_typed_step() -> None:
    fx, _, endpoint, _ = effects()
    fx.publisher.publish(
        ModelStatus(model="m", state=ModelState.STARTING, starting=StartStep.SPAWNING)
    )
    fx.phases.record("m", SwapPhase.START, 0.25)
    last = endpoint.events[-1]
    assert isinstance(last, StateChanged)
    assert last.status.starting is StartStep.HEALTH_CHECK
    assert last.status.reason == HEALTH_CHECK_REASON
