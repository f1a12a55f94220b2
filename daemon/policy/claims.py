"""The `Ready` replies handed out and not yet claimed, per model and proxy.

A request that waited for a model is answered `Ready` by the daemon; it is counted in flight only
once its proxy admits it, and between the two the reply is in transit (or queued in the proxy). A
swap that drained the model in that gap found it idle, stopped it, and the request was sent to a
closed port, or the start it waited for was wasted (docs/swapping.md, "A model made ready serves
its waiting requests first"). So each `Ready` is booked here until its proxy claims it (admitted,
then in flight in the same report, or not taken: the proxy's `Activity.claimed`), the proxy goes
silent, or CLAIM_WITHIN passes; no swap takes a model with Readys out (the scheduler's step 11,
whatever the eviction policy and collation's window say), and its drain does not end before they
are claimed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TypeVar

from ...ipc.timings import CLAIM_WITHIN
from .changes import Changes

T = TypeVar("T")


class ReadyClaims:
    def __init__(
        self, clock: Callable[[], float], changes: Changes, within: float = CLAIM_WITHIN
    ) -> None:
        self.clock = clock
        self.changes = changes
        self.within = within
        # model -> proxy -> the deadlines of its Readys out, oldest first (one clock: in order).
        self._out: dict[str, dict[str, list[float]]] = {}

    def hand_out(self, model_id: str, claimants: Mapping[str, int]) -> None:
        """`claimants[p]` Readys for `model_id` go to proxy `p` now."""
        deadline = self.clock() + self.within
        for proxy, count in claimants.items():
            if proxy and count > 0:
                out = self._out.setdefault(model_id, {}).setdefault(proxy, [])
                out.extend([deadline] * count)

    async def join(
        self, result: asyncio.Future[T], claimants: Counter[str], model_id: str, claimant: str
    ) -> T:
        """A swap's `result`, for a request of `claimant`'s (counted in the swap's `claimants`:
        its Ready is booked as the swap ends, `hand_out`)."""
        claimants[claimant] += 1
        try:
            # A requester that gives up must not cancel a start others (or the next request)
            # wait for.
            return await asyncio.shield(result)
        except asyncio.CancelledError:
            if result.done() and not result.cancelled() and not result.exception():
                self.claimed(model_id, claimant)  # booked, and never to be sent
            else:
                claimants[claimant] -= 1
            raise

    def claimed(self, model_id: str, proxy: str, count: int = 1) -> None:
        """Proxy `proxy` handled `count` Readys for `model_id` (the oldest first)."""
        out = self._out.get(model_id, {}).get(proxy)
        if not out or count <= 0:
            return
        del out[:count]
        self._tidy(model_id)
        self.changes.fire()

    def forget(self, proxy: str) -> None:
        """A proxy went silent: its Readys will never be claimed."""
        for model_id in list(self._out):
            if self._out[model_id].pop(proxy, None):
                self._tidy(model_id)
                self.changes.fire()

    def drop(self, model_id: str) -> None:
        """The run they were for is over (stopped, or its process exited)."""
        if self._out.pop(model_id, None):
            self.changes.fire()

    def out(self, model_id: str) -> int:
        """How many Readys for `model_id` are out and unclaimed (expired ones dropped)."""
        by_proxy = self._out.get(model_id)
        if not by_proxy:
            return 0
        now = self.clock()
        for proxy, deadlines in by_proxy.items():
            by_proxy[proxy] = [d for d in deadlines if d > now]
        self._tidy(model_id)
        return sum(len(d) for d in self._out.get(model_id, {}).values())

    def holding(self, models: frozenset[str]) -> Counter[str]:
        """Of `models`, those with Readys out, and how many."""
        return Counter({m: n for m in sorted(models) if (n := self.out(m))})

    def due(self, models: frozenset[str]) -> float | None:
        """When the first of the Readys out for `models` expires (None: none out): what is held
        for them is decided again then at the latest."""
        ends = [d for m in models for ds in self._out.get(m, {}).values() for d in ds]
        return min(ends, default=None)

    async def settled(self, model_id: str) -> None:
        """Until no Ready for `model_id` is out (each claimed, given up with its proxy, or
        expired)."""
        while self.out(model_id):
            until = self.due(frozenset({model_id}))
            wait = None if until is None else max(0.0, until - self.clock())
            await self.changes.wait(wait)

    def _tidy(self, model_id: str) -> None:
        by_proxy = self._out.get(model_id)
        if by_proxy is None:
            return
        for proxy in [p for p, d in by_proxy.items() if not d]:
            del by_proxy[proxy]
        if not by_proxy:
            del self._out[model_id]
