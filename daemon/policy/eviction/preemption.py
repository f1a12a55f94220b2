"""When a busy model may be stopped for a swap: the rule the eviction policies share.

A policy names the models it must stop; this decides whether the swap stops them now or waits
(docs/swapping.md, "Busy models"):

1. Collation (llama-swap's, so that A, B, A is answered A A B with one swap): for
   `collate_window` (the target's `maxWait`) after the swap was queued, a model with requests
   in flight is not stopped; the swap looks again every BUSY_POLL seconds, and at once when the
   proxies report a model's last request ended (the daemon's `Activity` handler). Right after a
   request took back a model the swap was draining, it first waits RECLAIM_PAUSE, so that the
   proxies' reports include that request.
   After the window it stops what it must, busy or not: llama-swap has no such bound, and steady
   traffic starves a swap.
2. `busyCheck` (opt-in, per model): a model with a check is read once more before the swap relies
   on its last reading (`Wait.check`); while the check reports work the swap waits, at most the
   model's `swapWait` from that reading, and then stops it anyway (`MakeRoom.overdue`).

A policy's set also passes through sleep's rule (`split`): an asleep model holds no room a set
policy counts, so it is left out; an awake model with a sleep setting is put to sleep instead of
stopped.

Pure, like the policies that call it.
"""

from __future__ import annotations

from dataclasses import replace

from ....ipc.causes import WaitCause
from ....ipc.states import ModelState
from ....ipc.timings import REPORT_GRACE
from .contract import Ask, Hold, MakeRoom, Room, Wait

RECLAIM_PAUSE = REPORT_GRACE
BUSY_POLL = 0.1


def make_room(stop: frozenset[str], ask: Ask, room: Room) -> MakeRoom | Wait:
    """Both rules, in order, for a set policy that names `stop` (asleep models left out: they
    hold no room it counts), then sleep's. While collation waits, the busy models the swap
    already waits for stay held, and none is read again yet."""
    stop = frozenset(m for m in stop if not _asleep(room, m))
    checked = busy_check_wait(stop, ask, room)
    waiting = collation_wait(stop, ask, room)
    if waiting is None:
        return split(checked, room) if isinstance(checked, MakeRoom) else checked
    holding = checked.holding if isinstance(checked, Wait) else {}
    return replace(waiting, holding=holding)


def split(made: MakeRoom, room: Room) -> MakeRoom:
    """`made` with each awake model that has a sleep setting put to sleep instead of stopped."""
    sleep = frozenset(m for m in made.stop if _sleeps(room, m))
    if not sleep:
        return made
    return replace(made, stop=made.stop - sleep, sleep=made.sleep | sleep)


def _asleep(room: Room, model_id: str) -> bool:
    occupant = room.occupants.get(model_id)
    return occupant is not None and occupant.state == ModelState.ASLEEP


def _sleeps(room: Room, model_id: str) -> bool:
    """An occupant that can be put to sleep: it has a sleep setting and is awake, or is going to
    sleep already (a stop under way is joined as it is)."""
    o = room.occupants.get(model_id)
    if o is None or o.model is None or o.model.sleep is None:
        return False
    return o.state not in (ModelState.STOPPING, ModelState.ASLEEP)


def collation_wait(stop: frozenset[str], ask: Ask, room: Room) -> Wait | None:
    """Rule 1: a Wait while the collation window lets the swap wait for busy models, else None."""
    if not stop or ask.now - ask.queued_at >= ask.collate_window:
        return None
    at_latest = ask.queued_at + ask.collate_window
    if ask.yielded_at is not None and ask.now - ask.yielded_at < RECLAIM_PAUSE:
        return Wait(
            "a request took back a model this swap was stopping",
            until=min(ask.now + BUSY_POLL, ask.yielded_at + RECLAIM_PAUSE),
            cause=WaitCause.COLLATION,
            serving=tuple(sorted(stop)),
            at_latest=at_latest,
        )
    busy = tuple(
        sorted(m for m in stop if (o := room.occupants.get(m)) is not None and o.in_flight)
    )
    if busy:
        return Wait(
            f"requests in flight for {', '.join(busy)} (collation)",
            until=ask.now + BUSY_POLL,
            cause=WaitCause.COLLATION,
            serving=busy,
            at_latest=at_latest,
        )
    return None


def busy_check_wait(stop: frozenset[str], ask: Ask, room: Room) -> MakeRoom | Wait:
    """Rule 2: MakeRoom(stop) once no model in `stop` holds the swap back by its busyCheck."""
    checked = [
        o
        for m in stop
        if (o := room.occupants.get(m)) is not None
        and o.model is not None
        and o.model.busy_check is not None
        and o.state != ModelState.ASLEEP  # an asleep server has no work to ask about
    ]
    unasked = frozenset(o.id for o in checked if o.id not in ask.asked)
    busy = [o for o in checked if o.busy is not None and o.busy.busy and o.id in ask.asked]
    holding = {}
    for o in busy:
        assert o.model is not None and o.model.busy_check is not None
        at_most = o.model.busy_check.swap_wait
        if ask.now < ask.asked[o.id] + at_most:
            holding[o.id] = Hold(ask.asked[o.id] + at_most, at_most)
    if unasked:
        # Those it waits for already stay held while the new ones are read.
        reason = f"reading the busy check of {', '.join(sorted(unasked))}"
        return Wait(reason, check=unasked, holding=holding, cause=WaitCause.BUSY)
    if holding:
        until = min(hold.until for hold in holding.values())
        return Wait(
            f"busy: {', '.join(sorted(holding))}",
            until=until,
            holding=holding,
            cause=WaitCause.BUSY,
        )
    return MakeRoom(stop, overdue=frozenset(o.id for o in busy))
