"""What a swap costs, and the queue's order that weighs it (docs/swapping.md, "Collation and what
a swap costs").

A model's swap-in cost is what bringing it back took the last times (the swap log's median of
its last loads, or of its last wakes when it is asleep: `Readings.swap_in_cost`). The queue's
order among swaps that conflict:

1. higher `priority` first (`routing.scheduler.settings.fifo.priority`: it keeps its meaning);
2. then the swaps that waited their target's `maxWait` or longer, by arrival: none starves;
3. then the cheaper swap-in first (an asleep model's wake before a cold start; a model never
   loaded yet, its cost unknown, after those with a known cost);
4. then arrival.

So a swap waits behind cheaper ones at most until its `maxWait` is over, and then for what was
already under way: at most `maxWait` plus the swap-ins it let pass, each cheaper than its own.

Also here: a swap that nobody waits for (only loads without `wait`: `?wait=false`, the router's
`/models/load`) takes out no model in use (`in_use`); it waits until they are idle, or until a
request waits for it (then it is any other swap).

Pure: the scheduler reads the costs and the clock and passes them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ...ipc.states import ModelState
from ...ipc.timings import REPORT_GRACE
from ..config import Config
from .eviction.contract import Occupant
from .swap import Turn

OrderKey = tuple[int, int, float, int]
# A model used this recently counts as in use: the proxies report a request that begins on an
# idle model at once, and the gap between back-to-back requests not at all (`IDLE_EDGE_S`), but
# a report may still come late on a loaded machine, and a person reads an answer before asking
# again; nobody waits for the swap it holds back, so it errs long.
IN_USE_FOR = 2 * REPORT_GRACE


def window(config: Config, target: str) -> float:
    """The target's `maxWait`: how long a swap to it serves loaded models' queues first."""
    model = config.models.get(target)
    return model.max_wait if model is not None else 0.0


def overdue_at(turn: Turn, max_wait: float) -> float:
    """When a swap queued at `turn` has waited its `maxWait` (monotonic)."""
    return turn.queued_at + max_wait


def order(turn: Turn, max_wait: float, cost: float | None, now: float) -> OrderKey:
    """The swap's place in the queue at `now` (smaller first): a total order at one instant."""
    if now >= overdue_at(turn, max_wait):
        return (-turn.priority, 0, 0.0, turn.seq)
    return (-turn.priority, 1, math.inf if cost is None else cost, turn.seq)


def next_change(turns: list[tuple[Turn, float]], now: float) -> float | None:
    """When the order among these swaps (each with its `maxWait`) may change next: the first of
    them to become overdue; None when all are."""
    times = [overdue_at(t, w) for t, w in turns if overdue_at(t, w) > now]
    return min(times, default=None)


def in_use(
    taken: frozenset[str], occupants: Mapping[str, Occupant], wall_now: float
) -> tuple[str, ...]:
    """The models in `taken` that serve requests now (in flight, busy by their busyCheck, or
    used within IN_USE_FOR): those a swap nobody waits for leaves be."""
    return tuple(
        sorted(
            m
            for m in taken
            if (o := occupants.get(m)) is not None
            and o.state == ModelState.READY
            and (
                o.in_flight
                or (o.busy is not None and o.busy.busy)
                or wall_now - o.last_use < IN_USE_FOR
            )
        )
    )
