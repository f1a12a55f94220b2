"""The swaps under way, one per target, and what the scheduler asks of them: who holds which
model, which swaps collide, and who is ahead in the queue."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any, Generic

from .records import H
from .swap import CLAIMING, Phase, Swap, Turn


class SwapQueue(Generic[H]):
    def __init__(self) -> None:
        self._swaps: dict[str, Swap[H]] = {}
        self._seq = 0

    def __iter__(self) -> Iterator[Swap[H]]:
        return iter(list(self._swaps.values()))

    def get(self, target: str) -> Swap[H] | None:
        return self._swaps.get(target)

    def targets(self) -> frozenset[str]:
        return frozenset(self._swaps)

    def add(self, target: str, result: asyncio.Future[H], priority: int, now: float) -> Swap[H]:
        self._seq += 1
        swap = self._swaps[target] = Swap(target, result, Turn(priority, self._seq, now))
        return swap

    def pop(self, target: str) -> Swap[H] | None:
        return self._swaps.pop(target, None)

    def remove(self, swap: Swap[H]) -> None:
        if self._swaps.get(swap.target) is swap:
            del self._swaps[swap.target]

    # ---------------------------------------------------------------------------- questions

    def claims(self) -> list[Swap[H]]:
        """The swaps that hold a claim (an aborted one keeps its claim until its task ends)."""
        return [s for s in self._swaps.values() if s.claim is not None]

    def evicting(self, model_id: str) -> bool:
        """Whether a swap claimed `model_id` to stop it or put it to sleep."""
        return any(s.holds(model_id) for s in self._swaps.values())

    def start_follows(self, model_id: str) -> bool:
        """Whether a swap stops `model_id` in order to start its own target next."""
        return any(s.phase in CLAIMING and s.holds(model_id) for s in self._swaps.values())

    def stopping(self, model_id: str) -> list[Swap[H]]:
        """The swaps that are stopping `model_id` right now (collation may take it back)."""
        return [s for s in self._swaps.values() if s.phase is Phase.STOPPING and s.holds(model_id)]

    def collides(self, target: str, evict: frozenset[str]) -> bool:
        """Whether a claimed swap stops (or puts to sleep) `target` or one of `evict`, or targets
        one of `evict`."""
        for other in self._swaps.values():
            claim = other.claim
            if other.target == target or claim is None:
                continue
            if target in claim.taken or other.target in evict or claim.taken & evict:
                return True
        return False

    def ahead(self, swap: Swap[H], order: Callable[[Swap[H]], Any]) -> list[Swap[H]]:
        """The queued swaps before `swap` in the queue's order (`order`: a swap's key, smaller
        first; `collation.order`, which weighs priority, maxWait and swap-in cost)."""
        mine = order(swap)
        return [
            other
            for other in self._swaps.values()
            if other is not swap and other.phase is Phase.QUEUED and order(other) < mine
        ]
