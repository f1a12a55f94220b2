"""Admission on one proxy process: the per-model concurrency limit (429), the in-flight counts that
hold a drain back, the `Drained` acks, and the rate-limited `Activity` casts.

Two counters per model (`state.ModelRuntime`):
* `reserved`: every admitted request that has not finished, including those waiting for the daemon's
  `ensure`. Compared with the model's per-process share of `concurrencyLimit` (429 past it).
* `in_flight`: requests being served by the upstream. A drain waits for it to reach 0. Requests that
  wait for `ensure` are not in it: they queue behind the drain in the daemon, so counting them would
  deadlock the swap they wait for.

A request's place with its model is one `async with` (`Admission.slot`): it reserves on entry
and releases on exit, counts the request in flight (`begin`) and out again (`end`), and ends it on
exit if it still is; nothing else of the request path touches the counters.

Activity: one cast per model per second, plus its edges: idle->busy at once (the daemon's view
of a model in use is current when a swap decides whether to take it out: docs/swapping.md, "No
one client thrashes the GPU for everyone"), and busy->idle once the model stayed idle IDLE_EDGE_S
(50 ms), so that the gap between back-to-back requests never reads as idle (`swapd status` and
the TTL hear of a finished request that much later, never a second later). The sockets edge (an
ignored websocket opened or the last one closed) goes at once too, and so does each `Ready` the
daemon answered an `ensure` with, once this process admitted its request
(`Slot.begin(claim=True)`: in flight in the same cast) or did not take it (`unclaimed`): the
daemon holds the model for a `Ready` until then (docs/architecture.md, "Ready and drain").
A run of back-to-back requests to a ready model therefore costs one cast at its start, one a
second while it lasts and one at its end, never one per request; a lone request costs two (its
start, its end).
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType

from ..ipc.states import ENDING_STATES
from ..ipc.timings import ACTIVITY_INTERVAL_S, IDLE_EDGE_S
from .floor.errors import TooManyRequests
from .mirror.changes import Applied
from .mirror.link import DaemonLink
from .mirror.state import ModelRuntime, ProxyState

log = logging.getLogger(__name__)


def too_many_requests() -> TooManyRequests:
    return TooManyRequests("Too many requests", headers={"Retry-After": "1"})


class Slot:
    """One request's place with its model (`Admission.slot`), as an `async with`: reserved on
    entry (429 past the model's share of its limit), released on exit; in flight between `begin`
    and `end` (a drain waits for it), and ended on exit if it still is."""

    __slots__ = ("_admission", "in_flight", "rt")

    def __init__(self, admission: Admission, rt: ModelRuntime) -> None:
        self._admission = admission
        self.rt = rt
        self.in_flight = False

    async def __aenter__(self) -> Slot:
        self._admission.reserve(self.rt)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.end()
        self._admission.release(self.rt)

    def begin(self, *, claim: bool = False) -> None:
        """Served by the upstream from now on: counted in flight; `claim`: it was admitted on
        the daemon's `Ready` (`Admission.begin`)."""
        self.in_flight = True
        self._admission.begin(self.rt, claim=claim)

    def end(self) -> None:
        """No longer in flight (if it was): it holds up no drain."""
        if self.in_flight:
            self.in_flight = False
            self._admission.end(self.rt)


class Admission:
    def __init__(self, state: ProxyState, link: DaemonLink) -> None:
        self._state = state
        self._link = link
        self._loop = asyncio.get_running_loop()
        state.changes.listen(self._applied)

    def slot(self, rt: ModelRuntime) -> Slot:
        """A request's place with `rt`'s model: `async with admission.slot(rt) as slot:`."""
        return Slot(self, rt)

    # --- the 429 counter -------------------------------------------------------------------------
    @staticmethod
    def reserve(rt: ModelRuntime) -> None:
        if rt.reserved >= rt.limit:
            raise too_many_requests()
        rt.reserved += 1

    @staticmethod
    def release(rt: ModelRuntime) -> None:
        rt.reserved -= 1

    # --- in flight -------------------------------------------------------------------------------
    def begin(self, rt: ModelRuntime, *, claim: bool = False) -> None:
        """A request is in flight; `claim`: it was admitted on the daemon's `Ready`."""
        rt.in_flight += 1
        self._activity(rt, claimed=1 if claim else 0)

    def unclaimed(self, rt: ModelRuntime) -> None:
        """A `Ready` the daemon sent was not taken (the model drains here, or the requester is
        gone): it holds the model no longer."""
        self._send_activity(rt, time.time(), claimed=1)

    def end(self, rt: ModelRuntime) -> None:
        rt.in_flight -= 1
        self._activity(rt)
        if rt.in_flight == 0 and rt.drain_epoch is not None and not rt.drain_acked:
            self._ack(rt)

    def sockets_changed(self, rt: ModelRuntime) -> None:
        """An ignored websocket opened or closed. Not use (the TTL's clock stays), but the daemon
        keeps an asleep model with one open from its `stopAfter`: told at once when the count
        turns zero or non-zero."""
        self._activity(rt, used=False)

    def _activity(self, rt: ModelRuntime, claimed: int = 0, used: bool = True) -> None:
        now = time.time()
        if used:
            rt.last_activity = now
        busy_edge = rt.in_flight > 0 and rt.activity_sent_in_flight == 0
        idle_edge = rt.in_flight == 0 and rt.activity_sent_in_flight > 0
        sockets_edge = bool(rt.ignored_ws) != (rt.activity_sent_websockets > 0)
        if claimed or busy_edge or sockets_edge:
            self._send_activity(rt, now, claimed)
        elif idle_edge:
            # Told once it stays idle IDLE_EDGE_S: a request that begins by then keeps the
            # daemon's "busy" true, and nothing goes out for the gap.
            rt.idle_since = self._loop.time()
            due = rt.idle_since + IDLE_EDGE_S
            if rt.activity_timer is None or rt.activity_due > due:
                self._flush_at(rt, due)
        elif now - rt.activity_sent_at >= ACTIVITY_INTERVAL_S:
            self._send_activity(rt, now)
        elif rt.activity_timer is None:
            delay = ACTIVITY_INTERVAL_S - (now - rt.activity_sent_at)
            self._flush_at(rt, self._loop.time() + delay)

    def _flush_at(self, rt: ModelRuntime, when: float) -> None:
        if rt.activity_timer is not None:
            rt.activity_timer.cancel()
        rt.activity_timer = self._loop.call_at(when, self._flush_activity, rt)
        rt.activity_due = when

    def _flush_activity(self, rt: ModelRuntime) -> None:
        rt.activity_timer = None
        now = time.time()
        told_busy = rt.activity_sent_in_flight > 0
        if told_busy and rt.in_flight == 0:
            # The idle edge: once the model stayed idle IDLE_EDGE_S.
            due = rt.idle_since + IDLE_EDGE_S
            if self._loop.time() < due:
                self._flush_at(rt, due)
                return
        elif told_busy and now - rt.activity_sent_at < ACTIVITY_INTERVAL_S:
            # Busy again before its idle edge went out: busy, as the daemon was told; the rest
            # waits for the second's cast.
            self._flush_at(
                rt, self._loop.time() + ACTIVITY_INTERVAL_S - (now - rt.activity_sent_at)
            )
            return
        self._send_activity(rt, now)

    def _send_activity(self, rt: ModelRuntime, now: float, claimed: int = 0) -> None:
        if rt.activity_timer is not None:
            rt.activity_timer.cancel()
            rt.activity_timer = None
        rt.activity_sent_at = now
        rt.activity_sent_in_flight = rt.in_flight
        rt.activity_sent_websockets = len(rt.ignored_ws)
        self._link.activity(
            rt.id, rt.in_flight, rt.last_activity, claimed=claimed, websockets=len(rt.ignored_ws)
        )

    # --- the daemon's changes: drains, stops ---------------------------------------------------
    def _applied(self, applied: Applied[ModelRuntime]) -> None:
        drain = applied.draining
        if drain is not None and drain.drain_epoch is not None:
            log.info(
                "draining %s (epoch %d): %d request(s) in flight",
                drain.id,
                drain.drain_epoch,
                drain.in_flight,
            )
            if drain.in_flight == 0:
                self._ack(drain)
        for rt, old in applied.models:
            if rt.state != old:
                self._stopped(rt)

    def _ack(self, rt: ModelRuntime) -> None:
        assert rt.drain_epoch is not None
        rt.drain_acked = True
        log.info("drained %s (epoch %d)", rt.id, rt.drain_epoch)
        self._link.drained(rt.id, rt.drain_epoch)

    @staticmethod
    def _stopped(rt: ModelRuntime) -> None:
        if rt.state in ENDING_STATES and rt.ignored_ws:
            # Ignored websockets hold nothing back; they end with their model.
            for ws in list(rt.ignored_ws):
                close = getattr(ws, "close_for_stop", None)
                if close is not None:
                    close()
