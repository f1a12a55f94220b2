"""A model's load estimate (issue 41): the swap log keeps how long each model's own loads and
wakes took (its spawn and health check; its wake's calls and health check) and says the median of
the last five, none before the first, whatever other models' records push out of its ring."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from swapd.daemon.observe.swap_log import SwapLog
from swapd.daemon.policy.story import Began, Ended, PhaseDone
from swapd.ipc.causes import StartCause, StopCause
from swapd.ipc.messages import Document, Event
from swapd.ipc.swap_record import SwapKind, SwapOutcome, SwapPhase


class _Endpoint:
    def publish_nowait(self, make: Callable[[int], Event]) -> None:
        make(0)

    def reply(self, identity: bytes, reply: Document) -> Any:
        return None


def _load(log: SwapLog, model: str, start: float, health: float, ok: bool = True) -> None:
    log.told(Began(model, SwapKind.START))
    log.told(PhaseDone(model, SwapPhase.START, start))
    log.told(PhaseDone(model, SwapPhase.HEALTH, health))
    if not ok:
        log.told(Ended(model, SwapOutcome.FAILED, "exited"))
        return
    log.told(Ended(model, SwapOutcome.OK))
    log.told(Began(model, SwapKind.STOP, StopCause.UNLOAD))
    log.told(Ended(model, SwapOutcome.OK, "unloaded", came_to=SwapKind.STOP))


def test_no_estimate_before_the_first_load_then_the_median_of_the_last_five() -> None:
    log = SwapLog("inst", _Endpoint(), size=3)
    assert log.estimates("a") == (None, None)
    _load(log, "a", 0.5, 9.0, ok=False)  # a failed start is no load time
    assert log.estimates("a") == (None, None)
    _load(log, "a", 1.0, 2.0)
    assert log.estimates("a") == (3.0, None)
    for health in (10.0, 4.0, 5.0, 6.0, 7.0):  # the 3.0 drops out: 11, 5, 6, 7, 8
        _load(log, "a", 1.0, health)
    for _ in range(3):
        _load(log, "b", 0.1, 0.1)  # a's records leave the ring: its estimate stays
    assert {r.model for r in log.records} == {"b"}
    assert log.estimates("a") == (7.0, None)


def test_a_wake_has_its_own_estimate() -> None:
    log = SwapLog("inst", _Endpoint())
    _load(log, "a", 1.0, 3.0)
    log.told(Began("a", SwapKind.START))
    log.told(PhaseDone("a", SwapPhase.START, 1.0))
    log.told(PhaseDone("a", SwapPhase.HEALTH, 3.0))
    log.told(Ended("a", SwapOutcome.OK))
    log.told(Began("a", SwapKind.STOP, StopCause.SLEEP))
    log.told(Ended("a", SwapOutcome.OK, "", came_to=SwapKind.SLEEP))
    log.wanted("a", StartCause.REQUEST)
    log.told(Began("a", SwapKind.WAKE))
    log.told(PhaseDone("a", SwapPhase.WAKE, 0.25))
    log.told(Ended("a", SwapOutcome.OK))
    assert log.estimates("a") == (4.0, 0.25)
