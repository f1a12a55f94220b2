"""One client connection: aiohttp's connection handler (`RequestHandler`), with a bounded time for
each request head, for each stall of a request body and of a response nobody reads, and quiet bad
requests (`server.py` makes one per connection).

* A request head must arrive within `head_timeout` (`HEAD_TIMEOUT_S`) of its first byte, or the
  connection gets a 408 and is closed. Bytes begin a head when they arrive while no request of
  the connection is being handled (`Dispatch` tells the connection: `handling`, `body`) and the
  last one's body has all arrived (what comes after a response whose handler did not read its
  body is that body, which aiohttp reads and drops). One timer per connection, armed when a
  head begins and none is, looks at the head's deadline when it fires and arms again for a
  later head: a kept-alive connection costs a timer every `head_timeout` at most, not one per
  request.
* A request body that stalls (`clientBodyTimeout`, nginx's `client_body_timeout`): while a
  request is handled and its body has not all arrived, bytes must keep coming, at most that many
  seconds apart, or the connection gets a 408 (a closed connection, when the response has begun)
  and is closed. The clock runs only while the proxy reads: when it has stopped reading because
  it holds all it may of the body (the model is slower than the client, or the request waits for
  a swap), the client is not stalling and its clock starts again when reading resumes. One timer
  per connection, armed when a request with a body yet to come begins.
* A request body that trickles (`clientBodyMinRate`, Apache's `mod_reqtimeout` `MinRate`): bytes
  that keep coming just inside `clientBodyTimeout` would hold a request for as long as the client
  likes. So the body may take `clientBodyTimeout` seconds plus one second for every
  `clientBodyMinRate` bytes received, or the connection gets a 408 the same way: past the grace,
  the body must average at least that rate. Time the proxy holds the client back does not count
  (the rate's clock starts again, as the stall's does). Counted in `stats.slow_bodies`. The same
  timer serves both.
* A response nobody reads (`sendTimeout`, nginx's `send_timeout`): when the connection's write
  buffer is full (the transport paused writing: the client reads nothing), the client must read
  again within that many seconds, or the connection is dropped. A client that reads, however
  slowly, and a response that waits for its model, are never cut.
* Either way the request's handler is cancelled (the connection is gone), so its in-flight count
  is released and a drain waiting for it proceeds. Both limits are the routing table's, so a
  reload changes them for the next timer; 0 turns one off. Counted in `stats.body_timeouts` and
  `stats.send_timeouts`.
* A request the parser rejects is a client's mistake: a 400 in the OpenAI error shape with a
  fixed message per kind of fault (never the offending bytes, which may hold a key), one DEBUG
  log line naming the kind, and a count in `stats.bad_requests`; never an ERROR traceback. An
  exception in swapd's own code is still a 500 with its traceback logged.

Only aiohttp's public names are used (`data_received`, `connection_lost`, `handle_error`,
`force_close`, `transport`, a request's `protocol` and `content`): its private state changes
from release to release.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from aiohttp import StreamReader, http_exceptions, web

from .floor.errors import error_response
from .mirror.state import ProxyState
from .observe.stats import Stats

log = logging.getLogger(__name__)

HEAD_TIMEOUT_S = float(os.environ.get("SWAPD_PROXY_HEAD_TIMEOUT_S", "10"))
MAX_LINE = 8190

_FAULTS: tuple[tuple[type[BaseException], str], ...] = (
    (http_exceptions.LineTooLong, f"request line or header field longer than {MAX_LINE} bytes"),
    (http_exceptions.BadHttpMethod, "malformed request method"),
    (http_exceptions.BadStatusLine, "malformed request line"),
    (http_exceptions.InvalidURLError, "malformed request target"),
    (http_exceptions.InvalidHeader, "malformed header field"),
    (http_exceptions.TransferEncodingError, "malformed chunked body"),
    (http_exceptions.ContentLengthError, "malformed or conflicting Content-Length"),
    (http_exceptions.BadHttpMessage, "malformed request"),
)


def fault_of(exc: BaseException | None) -> str:
    for kind, text in _FAULTS:
        if isinstance(exc, kind):
            return text
    return "malformed request"


class SwapdRequestHandler(web.RequestHandler):
    """aiohttp's connection handler, with the bounded head time and quiet bad requests."""

    __slots__ = (
        "_body_timer",
        "_clock",
        "_head_timeout",
        "_head_timer",
        "_held_for",
        "_send_timer",
        "_state",
        "_stats",
        "body",
        "body_at",
        "body_got",
        "body_since",
        "client_held",
        "handling",
        "head_since",
        "request",
    )

    def __init__(
        self,
        manager: web.Server,
        stats: Stats,
        *,
        loop: asyncio.AbstractEventLoop,
        state: ProxyState | None = None,
        head_timeout: float = HEAD_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, loop=loop, **kwargs)
        self._stats = stats
        self._clock = loop
        self._state = state  # its routing table holds the body and send timeouts
        self._head_timeout = head_timeout
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        # Loop time of the first byte of a head under way (0: none); `Dispatch` sets it to 0 when
        # the head is complete, and (attributes, not calls: every request sets them) whether a
        # request of this connection is being handled, the request, and its body.
        self.head_since = 0.0
        self.handling = False
        self.request: web.BaseRequest | None = None
        self.body: StreamReader | None = None
        self.body_at = 0.0  # loop time a body's last bytes came (or reading resumed)
        # The body's rate: bytes received since `body_since` (loop time it began, or reading
        # resumed after the proxy held the client back).
        self.body_got = 0
        self.body_since = 0.0
        # Seconds the request `_held_for` has held up a drain of its model (`drain_bound.py`).
        self.client_held = 0.0
        self._held_for: web.BaseRequest | None = None

    # --- the head's clock ---------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        # Asked before aiohttp takes the bytes: the last body may be complete after them.
        # (aiohttp calls it with no bytes too, when it takes up bytes it held back.)
        head = data and not self.handling and not self.head_since
        if head:
            body = self.body
            head = body is None or body.is_eof()
        super().data_received(data)
        if not head:  # a head's clock already runs, or a request or its body is under way
            if self.handling:
                self.body_at = self._clock.time()
                self.body_got += len(data)
            return
        self.head_since = now = self._clock.time()
        if self._head_timer is None:
            self._head_timer = self._clock.call_at(now + self._head_timeout, self._head_deadline)

    def _head_deadline(self) -> None:
        self._head_timer = None
        since = self.head_since
        if self.handling or not since or self.transport is None:
            return  # no head under way: the next one arms the timer again
        left = since + self._head_timeout - self._clock.time()
        if left > 0:  # a later head than the one the timer was armed for
            self._head_timer = self._clock.call_later(left, self._head_deadline)
            return
        self._stats.bad_requests += 1
        log.debug(
            "request head not complete after %.0f s; closing the connection", self._head_timeout
        )
        self._time_out("request head not received in time")

    def _time_out(self, message: str) -> None:
        """A 408 with `message` (unless a response has begun), and the connection closed."""
        assert self.transport is not None
        request = self.request
        if not self.handling or request is None or request.writer.output_size == 0:
            body = error_response(408, message).body
            assert isinstance(body, bytes)
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )
        self.force_close()

    # --- a body's clock -------------------------------------------------------------------------
    def body_expected(self) -> None:
        """`Dispatch`: the request being handled has a body yet to come."""
        self.body_at = self.body_since = now = self._clock.time()
        self.body_got = 0
        timeout = self._timeouts()[0]
        if timeout > 0 and self._body_timer is None:
            self._body_timer = self._clock.call_at(now + timeout, self._body_deadline)

    def _timeouts(self) -> tuple[float, float]:
        if self._state is None:
            return 0.0, 0.0
        table = self._state.routes.table
        return table.client_body_timeout, table.send_timeout

    def _min_rate(self) -> float:
        return self._state.routes.table.client_body_min_rate if self._state is not None else 0.0

    def _body_deadline(self) -> None:
        self._body_timer = None
        body, transport = self.body, self.transport
        if not self.handling or body is None or body.is_eof() or transport is None:
            return  # no body under way: the next one arms the timer again
        timeout = self._timeouts()[0]
        if timeout <= 0:
            return
        now = self._clock.time()
        if not transport.is_reading():
            # The proxy holds the client back: not the client's stall, nor its slowness.
            self.body_at = self.body_since = now
            self.body_got = 0
        left = self.body_at + timeout - now
        rate = self._min_rate()
        # Apache's MinRate: the grace, plus a second for every `rate` bytes received.
        rate_left = self.body_since + timeout + self.body_got / rate - now if rate > 0 else left
        if left > 0 and rate_left > 0:
            self._body_timer = self._clock.call_later(min(left, rate_left), self._body_deadline)
            return
        if left <= 0:
            self._stats.body_timeouts += 1
            log.info(
                "request body stalled for %g s (clientBodyTimeout): closing the connection",
                timeout,
            )
            self._time_out(f"request body not received in time (clientBodyTimeout {timeout:g} s)")
            return
        self._stats.slow_bodies += 1
        spent = now - self.body_since
        log.info(
            "request body came at %.0f bytes/s over %.0f s (clientBodyMinRate %g): closing the "
            "connection",
            self.body_got / spent,
            spent,
            rate,
        )
        self._time_out(
            f"request body too slow: {self.body_got} bytes in {spent:.0f} s, under "
            f"clientBodyMinRate {rate:g} bytes/s after clientBodyTimeout {timeout:g} s"
        )

    # --- a response nobody reads ----------------------------------------------------------------
    def pause_writing(self) -> None:
        super().pause_writing()
        timeout = self._timeouts()[1]
        if timeout > 0 and self._send_timer is None:
            self._send_timer = self._clock.call_later(timeout, self._send_deadline)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_deadline(self) -> None:
        self._send_timer = None
        transport = self.transport
        if transport is None:
            return
        self._stats.send_timeouts += 1
        log.info(
            "a client read nothing of its response for %g s (sendTimeout): dropping the connection",
            self._timeouts()[1],
        )
        transport.abort()  # not close(): that would wait for the client to read what is queued

    # --- a drain its client holds up (`drain_bound.py`) -----------------------------------------
    def waits_on_client(self) -> bool:
        """Whether the request under way waits on its client alone: the client reads nothing of
        its response (the write buffer is full), or its body has not all come and the proxy is
        reading it (it does not hold the client back)."""
        transport = self.transport
        if not self.handling or transport is None:
            return False
        if self.writing_paused:
            return True
        body = self.body
        return body is not None and not body.is_eof() and transport.is_reading()

    def hold(self, seconds: float) -> float:
        """Count `seconds` more that the request under way held up a drain; its total."""
        if self._held_for is not self.request:
            self._held_for, self.client_held = self.request, 0.0
        self.client_held += seconds
        return self.client_held

    def cut(self, message: str) -> None:
        """End the request under way: a 408 with `message` when its response has not begun,
        else the connection dropped (not closed: that would wait for the client to read)."""
        transport, request = self.transport, self.request
        if transport is None:
            return
        if self.writing_paused or (request is not None and request.writer.output_size > 0):
            transport.abort()
        else:
            self._time_out(message)

    def connection_lost(self, exc: BaseException | None) -> None:
        for timer in (self._head_timer, self._body_timer, self._send_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._send_timer = None
        self.body = None
        self.request = self._held_for = None
        super().connection_lost(exc)

    # --- bad requests ---------------------------------------------------------------------------
    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            return super().handle_error(request, status, exc, message)
        self._stats.bad_requests += 1
        fault = fault_of(exc)
        # The exception's own text may quote the offending bytes (a header with a key in it).
        log.debug("bad request from %s: %s (%s)", request.remote, fault, type(exc).__name__)
        if request.writer.output_size > 0:
            raise ConnectionError("response already under way")
        response = error_response(status, fault)
        response.force_close()
        return response
