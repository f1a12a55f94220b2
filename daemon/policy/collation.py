"""The queue's rules for `SwapEngine` (swaps.py): collation, its bound, and priorities.

* Collation (llama-swap's, so that A, B, A is answered A A B with one swap): for COLLATE_WINDOW
  after a swap was queued, it does not start draining models that have requests in flight, and a
  request for a model it is draining takes that model back (the swap queues again, and waits
  RECLAIM_PAUSE before draining it again, so that the in-flight reports include that request).
* Bound: after the window the swap drains what it must, busy or not; requests for those models
  then wait behind it. llama-swap has no such bound (steady traffic starves a queued swap).
* Priorities: of the queued swaps that may begin and conflict, the higher `fifo.priority` goes
  first, then the one queued first.
Only stops that a swap began are taken back; unloads, TTL stops, reloads and shutdown are not.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from typing import Generic

from ...ipc.timings import REPORT_GRACE
from ..config import Config
from . import eviction, placing
from .records import Effects, H, ModelRecord, Swap

COLLATE_WINDOW = 5.0
RECLAIM_PAUSE = REPORT_GRACE
# How often a swap that waits for busy models to go idle looks again (in-flight reports do not
# wake the scheduler).
BUSY_POLL = 0.1


class Collation(Generic[H]):
    # Provided by SwapEngine.
    config: Config
    effects: Effects[H]
    canonical_gpus: Mapping[str, str] | None
    collate_window: float
    shutting_down: bool
    _swaps: dict[str, Swap[H]]
    _stops: dict[str, asyncio.Task[None]]
    _unloading: Counter[str]
    _draining: dict[str, asyncio.Task[None]]
    _collatable: set[str]

    def clock(self) -> float: ...  # SwapEngine sets it: a callable attribute

    def loaded(self) -> frozenset[str]: ...

    def occupants(self) -> list[placing.Occupant]: ...

    def _set(self, rec: ModelRecord[H], state: str, reason: str = "") -> None: ...

    def _collides(self, target: str, evict: frozenset[str]) -> bool: ...

    def _collate(self, rec: ModelRecord[H]) -> bool:
        """A request for a model a queued swap is draining: within the swaps' window, cancel the
        drain so that the model serves it, and send those swaps back to the queue."""
        drain = self._draining.get(rec.id)
        if drain is None or drain.done():
            # Over (every proxy acked): its stop goes on as soon as it resumes, so the request
            # waits for that stop and starts the model again.
            return False
        swaps = [s for s in self._swaps.values() if s.claimed and rec.id in s.evict]
        if not swaps or rec.id not in self._collatable:
            return False
        if rec.id in self._unloading or self.shutting_down:
            return False
        now = self.clock()
        if any(now - s.queued_at >= self.collate_window for s in swaps):
            return False
        for swap in swaps:
            swap.claimed = False
            swap.evict = frozenset()
            swap.yielded_at = now
        drain.cancel()
        # At once, not when the stop task notices: the next request must see the model ready.
        self._stops.pop(rec.id, None)
        self._collatable.discard(rec.id)
        self._set(rec, "ready", "kept: requested again before its stop")
        return True

    def _queued_ahead(self, swap: Swap[H]) -> list[Swap[H]]:
        key = (-swap.priority, swap.seq)
        return [
            other
            for other in self._swaps.values()
            if other is not swap
            and not other.claimed
            and other.failed is None
            and (-other.priority, other.seq) < key
        ]

    def _claimable(self, swap: Swap[H]) -> tuple[frozenset[str] | None, bool]:
        """What `swap` would evict if it may claim now (else None), and whether it waits only
        for busy models to go idle (then nothing wakes it: it polls)."""
        target = swap.target
        running = self.loaded() | {s.target for s in self._swaps.values() if s.claimed}
        evict = eviction.evict_for(
            target,
            running - {target},
            placing.placed_view(self.config, self.occupants()),
            canonical_gpus=self.canonical_gpus,
        )
        if self._collides(target, evict):
            return None, False
        now = self.clock()
        if evict and now - swap.queued_at < self.collate_window:
            if swap.yielded_at is not None and now - swap.yielded_at < RECLAIM_PAUSE:
                return None, True
            # llama-swap's rule: busy models are not preempted (here: for the window).
            if any(self.effects.busy(m) for m in evict):
                return None, True
        return evict, False

    def _blocked_by_queue(self, swap: Swap[H], evict: frozenset[str]) -> bool:
        """A swap ahead in the queue that may claim now and conflicts with this one goes first."""
        for other in self._queued_ahead(swap):
            if other.target not in self.config.models:
                continue
            theirs, _ = self._claimable(other)
            if theirs is None:
                continue
            if other.target in evict or swap.target in theirs or theirs & evict:
                return True
            if other.target == swap.target:
                return True
        return False
