"""A bound on how long a drain waits for requests their clients hold up (`drainClientTimeout`).

A drain waits for its model's requests in flight (`admission.py`), so that a swap never cuts a
request off. A client can make that wait as long as it likes without ever stalling: a body sent a
byte at a time just inside `clientBodyTimeout`, an answer read a few bytes at a time just inside
`sendTimeout`. So while a drain of a model is pending on this proxy, each request being forwarded
to that model (`Account.forwarding`) that waits on its client alone (its body has not all come
and the proxy is reading it, or the client reads nothing of its answer:
`SwapdRequestHandler.waits_on_client`) counts the time it does so, sampled every second (a
quarter of the bound, if less). One that has held the drain up for `drainClientTimeout` seconds
in all is cut, as a stalled one would be: a 408 when its response has not begun, else its
connection dropped; its handler is cancelled, so it leaves the in-flight count and the drain goes
on. Counted in `stats.drain_cuts`. A request its model keeps busy (a long generation read as it
comes, a body the model takes slowly) waits on the model, not on its client, and is never cut.
The bound is the routing table's, so a reload changes it; 0 turns it off.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from .connection import SwapdRequestHandler
from .floor.account import ACCOUNT, Account
from .mirror.changes import Applied
from .mirror.state import ProxyState
from .observe.stats import Stats

log = logging.getLogger(__name__)

SAMPLE_S = 1.0


class DrainBound:
    """Cuts the requests that hold up a pending drain by their clients' doing past the bound."""

    __slots__ = ("_last", "_loop", "_manager", "_state", "_stats", "_timer")

    def __init__(
        self,
        state: ProxyState,
        manager: web.Server,
        stats: Stats,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._state = state
        self._manager = manager
        self._stats = stats
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._last = 0.0
        state.changes.listen(self._applied)

    def close(self) -> None:
        self._state.changes.forget(self._applied)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _applied(self, applied: Applied[object]) -> None:
        if applied.draining is not None and self._timer is None:
            self._last = self._loop.time()
            self._timer = self._loop.call_later(self._step(), self._sample)

    def _bound(self) -> float:
        return self._state.routes.table.drain_client_timeout

    def _step(self) -> float:
        return min(SAMPLE_S, self._bound() / 4) or SAMPLE_S

    def _sample(self) -> None:
        self._timer = None
        bound = self._bound()
        draining = {
            rt.id
            for rt in self._state.runtimes.values()
            if rt.drain_epoch is not None and not rt.drain_acked
        }
        if not draining or bound <= 0:
            return  # the next drain starts the sampling again
        now = self._loop.time()
        spent, self._last = now - self._last, now
        for conn in self._manager.connections:
            if isinstance(conn, SwapdRequestHandler):
                self._look(conn, draining, spent, bound)
        self._timer = self._loop.call_later(self._step(), self._sample)

    def _look(
        self, conn: SwapdRequestHandler, draining: set[str], spent: float, bound: float
    ) -> None:
        request = conn.request
        acc = request.get(ACCOUNT) if request is not None else None
        if not isinstance(acc, Account) or not acc.forwarding or acc.model not in draining:
            return
        if not conn.waits_on_client() or conn.hold(spent) < bound:
            return
        self._stats.drain_cuts += 1
        log.info(
            "a request to %s held up its drain for %g s waiting on its client "
            "(drainClientTimeout): ending it",
            acc.model,
            bound,
        )
        conn.cut(
            f"request ended: its model {acc.model} is being swapped out and the request waited "
            f"on its client for {bound:g} s (drainClientTimeout)"
        )
