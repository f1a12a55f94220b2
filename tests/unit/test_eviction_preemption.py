"""When a busy model may be stopped for a swap (daemon/policy/eviction/preemption.py), the rule
the set policies share: collation's window for requests in flight, a `busyCheck`'s `swapWait`.
Pure: an ask, a room, a decision."""

from __future__ import annotations

import msgspec

from swapd.daemon.config import ModelConfig
from swapd.daemon.config.sections.busy_check_fields import PRESETS
from swapd.daemon.policy.eviction.contract import Ask, BusyReading, MakeRoom, Occupant, Room, Wait
from swapd.daemon.policy.eviction.preemption import BUSY_POLL, RECLAIM_PAUSE, make_room
from swapd.ipc.states import ModelState
from tests.support.models import model

WINDOW = 5.0
CHECKED = msgspec.structs.replace(PRESETS["comfyui"], swap_wait=60.0)


def occupant(
    model_id: str, *, in_flight: bool = False, busy: bool | None = None, checked: bool = False
) -> Occupant:
    definition: ModelConfig = model(model_id, busy_check=CHECKED if checked else None)
    reading = None if busy is None else BusyReading(busy, "upstream reports 1 running job")
    return Occupant(model_id, definition, ModelState.READY, in_flight=in_flight, busy=reading)


def ask(now: float, **kw: object) -> Ask:
    return Ask(model("t"), now=now, queued_at=100.0, collate_window=WINDOW, **kw)  # type: ignore[arg-type]


def room(*occupants: Occupant) -> Room:
    return Room({o.id: o for o in occupants})


def test_requests_in_flight_hold_a_swap_for_the_collation_window_only() -> None:
    busy = room(occupant("a", in_flight=True))
    held = make_room(frozenset({"a"}), ask(101.0), busy)
    assert isinstance(held, Wait) and held.until == 101.0 + BUSY_POLL and "collation" in held.reason
    assert make_room(frozenset({"a"}), ask(100.0 + WINDOW), busy) == MakeRoom(frozenset({"a"}))
    # Nothing to stop: nothing to wait for.
    assert make_room(frozenset(), ask(101.0), busy) == MakeRoom(frozenset())


def test_after_a_take_back_the_swap_waits_for_the_reports_first() -> None:
    idle = room(occupant("a"))
    paused = make_room(frozenset({"a"}), ask(101.0, yielded_at=100.5), idle)
    assert isinstance(paused, Wait) and paused.until == 101.0 + BUSY_POLL
    after = make_room(frozenset({"a"}), ask(100.5 + RECLAIM_PAUSE, yielded_at=100.5), idle)
    assert after == MakeRoom(frozenset({"a"}))


def test_a_busy_check_is_read_again_then_held_for_its_swap_wait_then_overdue() -> None:
    busy = room(occupant("a", busy=True, checked=True), occupant("b"))
    first = make_room(frozenset({"a", "b"}), ask(200.0), busy)
    assert isinstance(first, Wait) and first.check == {"a"} and not first.holding
    held = make_room(frozenset({"a", "b"}), ask(201.0, asked={"a": 200.0}), busy)
    assert isinstance(held, Wait) and set(held.holding) == {"a"}
    assert held.holding["a"].until == 260.0 and held.until == 260.0
    over = make_room(frozenset({"a", "b"}), ask(260.0, asked={"a": 200.0}), busy)
    assert over == MakeRoom(frozenset({"a", "b"}), overdue=frozenset({"a"}))
    idle = room(occupant("a", busy=False, checked=True), occupant("b"))
    assert make_room(frozenset({"a"}), ask(201.0, asked={"a": 200.0}), idle) == MakeRoom(
        frozenset({"a"})
    )


def test_a_model_held_stays_held_while_another_is_read_and_while_collation_waits() -> None:
    both = room(
        occupant("a", busy=True, checked=True),
        occupant("b", busy=True, checked=True, in_flight=True),
    )
    reading = make_room(frozenset({"a", "b"}), ask(110.0, asked={"a": 105.0}), both)
    assert isinstance(reading, Wait) and reading.check == {"b"} and set(reading.holding) == {"a"}
    collating = make_room(frozenset({"a", "b"}), ask(101.0, asked={"a": 100.5}), both)
    assert isinstance(collating, Wait) and "collation" in collating.reason
    assert set(collating.holding) == {"a"} and not collating.check
