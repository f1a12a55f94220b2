"""A swap: making one target ready for everyone who waits for it, in an explicit phase.

```
          claim                stop the evictees             start the target
  QUEUED ───────▶ CLAIMED ─────────────────────▶ STOPPING ───────────────────▶ STARTING ──▶ done
    ▲               │ (nothing to stop)              │                           ▲  │
    │               └────────────────────────────────┼───────────────────────────┘  │
    ├── a request took back a model it was stopping ─┤                              │
    ├── it put models to sleep, placed by memory ────┘                              │
    ├── an adopted process did not become healthy ──────────────────────────────────┤
    └── RESTARTING ◀── a reload changed the definition being started ───────────────┘

  any phase ──▶ ABORTED: answered otherwise (unloaded, swapd shutting down); it still stops
                what it started, and ends.
```

STOPPING puts the evictees with a sleep setting to sleep (`Claim.sleep`) rather than stopping
them; placed by memory, the swap then decides again with them asleep at their residual. STARTING
wakes an asleep target rather than starting it (a wake that fails starts it cold, still STARTING).

Each phase holds only what it needs: a queued swap its waits (what it was asked, when it last
yielded), a claim (CLAIMED to RESTARTING) the models it stops and where its target runs, a start
its task and definition, an aborted swap why and what its waiters were answered. A transition the
diagram does not have raises `IllegalTransition` (a bug in the scheduler, never a user's doing).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Generic

from ...ipc.causes import StopCause
from ..config import ModelConfig
from ..errors import EnsureError
from .eviction.contract import Decision, Placement
from .records import H


class Phase(Enum):
    QUEUED = "queued"
    CLAIMED = "claimed"
    STOPPING = "stopping"
    STARTING = "starting"
    RESTARTING = "restarting"
    ABORTED = "aborted"


_NEXT: dict[Phase, frozenset[Phase]] = {
    Phase.QUEUED: frozenset({Phase.CLAIMED, Phase.ABORTED}),
    Phase.CLAIMED: frozenset({Phase.STOPPING, Phase.STARTING, Phase.ABORTED}),
    Phase.STOPPING: frozenset({Phase.STARTING, Phase.QUEUED, Phase.ABORTED}),
    Phase.STARTING: frozenset({Phase.RESTARTING, Phase.QUEUED, Phase.ABORTED}),
    Phase.RESTARTING: frozenset({Phase.QUEUED, Phase.ABORTED}),
    Phase.ABORTED: frozenset(),
}
# The phases in which a swap holds a claim (its evictees and target are its to stop and start).
CLAIMING = frozenset({Phase.CLAIMED, Phase.STOPPING, Phase.STARTING, Phase.RESTARTING})


class IllegalTransition(RuntimeError):
    pass


@dataclass(frozen=True)
class Turn:
    """What a swap's place in the queue is made of: its priority, its arrival (`seq`) and when
    it was queued; `collation.order` weighs them with its target's maxWait and swap-in cost."""

    priority: int
    seq: int
    # monotonic; collation's window (the target's maxWait) runs from it: when it was queued, or
    # when someone waited for it again after nobody did (`Swap.watched`)
    queued_at: float


@dataclass
class Waits:
    """What a queued swap carries from one decision to the next."""

    yielded_at: float | None = None  # a request took back a model it was stopping, then
    asked: dict[str, float] = field(default_factory=dict)  # busy checks read again, and when
    room_since: float | None = None  # placement by memory: since when it waits for room
    on: str = ""  # what it waits for now ("": it is deciding, not waiting)
    decision: Decision | None = None  # the policy's last decision


@dataclass(frozen=True)
class Claim:
    """The models a swap stops (`evict`), those it puts to sleep (`sleep`), and where its target
    runs (placement by memory)."""

    evict: frozenset[str]
    placement: Placement | None = None
    sleep: frozenset[str] = frozenset()

    @property
    def taken(self) -> frozenset[str]:
        """Every model it takes out of the way, stopped or put to sleep."""
        return self.evict | self.sleep

    @property
    def gpus(self) -> tuple[str, ...] | None:
        return self.placement.gpus if self.placement is not None else None


@dataclass(frozen=True)
class Start(Generic[H]):
    """A start under way: the definition and the task (None from an adopted process: it was
    not healthy)."""

    model: ModelConfig
    task: asyncio.Task[H | None]


@dataclass(frozen=True)
class Abort:
    """What the waiters were answered, and why the swap ends."""

    error: EnsureError
    cause: StopCause


class Swap(Generic[H]):
    def __init__(self, target: str, result: asyncio.Future[H], turn: Turn) -> None:
        self.target = target
        # What the ensures await. Separate from the task so that an unload or a shutdown can
        # answer them at once while the task still cleans up (an aborted start stops its process).
        self.result = result
        self.turn = turn
        self.task: asyncio.Task[None] | None = None
        # The proxies of the requests that wait for it (each gets a `Ready` booked when it ends).
        self.claimants: Counter[str] = Counter()
        self._phase = Phase.QUEUED
        self._waits: Waits | None = Waits()
        self._claim: Claim | None = None
        self._start: Start[H] | None = None
        self._abort: Abort | None = None
        # The ensures that wait for it now (a load without `wait` is none): a swap nobody waits
        # for takes out no model in use (collation.py).
        self.watchers = 0

    def __repr__(self) -> str:
        return f"Swap({self.target!r}, {self._phase.name})"

    # ---------------------------------------------------------------------------- the phase

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def waits(self) -> Waits | None:
        """QUEUED: what it carries from one decision to the next."""
        return self._waits

    @property
    def claim(self) -> Claim | None:
        """CLAIMED to RESTARTING, and ABORTED when it had one: what it holds."""
        return self._claim

    @property
    def start(self) -> Start[H] | None:
        """STARTING, and ABORTED while a start it did not cancel goes on."""
        return self._start

    @property
    def abort(self) -> Abort | None:
        return self._abort

    def holds(self, model_id: str) -> bool:
        """Whether it claimed `model_id` to stop it or put it to sleep."""
        return self._claim is not None and model_id in self._claim.taken

    # --------------------------------------------------------------------------- transitions

    def _to(self, phase: Phase) -> None:
        if phase not in _NEXT[self._phase]:
            raise IllegalTransition(f"swap to {self.target}: {self._phase.name} -> {phase.name}")
        self._phase = phase

    def claimed(self, claim: Claim) -> None:
        self._to(Phase.CLAIMED)
        self._waits, self._claim = None, claim

    def stopping(self) -> None:
        self._to(Phase.STOPPING)

    def starting(self, start: Start[H]) -> None:
        if self._phase is Phase.STARTING and self._start is None:
            pass  # a wake failed (its start ended): the cold start that follows, same phase
        else:
            self._to(Phase.STARTING)
        self._start = start

    def started(self) -> None:
        """The start under way ended (its task is done); the phase stays until the next."""
        self._start = None

    def restarting(self) -> None:
        """A reload changed the definition being started: its start is cancelled."""
        self._to(Phase.RESTARTING)
        start, self._start = self._start, None
        if start is not None:
            start.task.cancel()

    def watched(self, now: float) -> None:
        """Someone waits for it again after nobody did (its first waiter, or one after all gave
        up): while it is queued, collation's window (its target's `maxWait`) runs from `now`, so
        the time nobody waited for it does not count. A client that asks and leaves, again and
        again, never makes its swap overdue: each of its requests waits its own `maxWait` for the
        loaded models' queues (docs/swapping.md, "No one client thrashes the GPU")."""
        if self._phase is Phase.QUEUED:
            self.turn = replace(self.turn, queued_at=now)

    def queued(self, yielded_at: float | None = None) -> None:
        """Back in the queue: a model it was stopping was taken back (`yielded_at`), the start
        of an adopted process failed, or a restart cleaned up."""
        self._to(Phase.QUEUED)
        self._waits, self._claim, self._start = Waits(yielded_at=yielded_at), None, None

    def aborted(self, abort: Abort, *, cancel_start: bool = True) -> bool:
        """Answer the waiters with `abort.error` now; the swap stops at its next step (a start
        under way is cancelled, which stops the process it started, unless `cancel_start` is
        False). Aborted again, it keeps its first answer (False) and may still cancel the
        start."""
        first = self._phase is not Phase.ABORTED
        if first:
            self._to(Phase.ABORTED)
            self._abort, self._waits = abort, None
        if not self.result.done():
            self.result.set_exception(abort.error)
        if cancel_start and self._start is not None:
            self._start.task.cancel()
        return first


def retrieve(future: asyncio.Future[H]) -> None:
    # Every waiter may have given up: the outcome is still consumed (no "never retrieved" noise).
    if not future.cancelled():
        future.exception()
