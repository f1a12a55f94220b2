"""The hot path: model requests with a JSON body, and GETs through `/upstream/`, served without
aiohttp's server.

Every connection on the listening socket starts here. Its requests are parsed with httptools
(llhttp, the parser the upstream client uses too). Two kinds are served here from start to end,
for a local model at a plain `http://` upstream, on HTTP/1.1:
* a POST to a model-dispatched route (`model_routes.MODEL_ROUTES`) with a JSON body of known
  length (no chunked body, no `Expect`, no upgrade) of at most 1 MiB;
* a GET without a body to `/upstream/<model>/<path>` for a model that is ready, on a path
  `upstream.ignorePaths` does not match (what streams SSE or serves a model's own API).
How:
* the checks and errors of the aiohttp path, from the same functions (API key 401, malformed
  body or no model 400, unknown model 404, concurrency limit 429, the filters);
* a model that is ready and not draining is counted in flight (`admission.py`) and the request
  sent on a pooled upstream connection and answered from that connection's callbacks, streamed
  bodies included: no task and no round trip through the event loop, unless it has to wait (for
  a new connection, or a retry), and the upstream held back while the client reads slower;
* any other model (model routes only) waits for the daemon's `Ensure` in a task
  (`dispatch.acquire`), like on the aiohttp path.

Anything else (other routes, peers' models, other framings, `/upstream/` redirects and 409s and
ignored paths, a request that is not yet routable) is lent to aiohttp before a byte of it is
answered: aiohttp's request handler gets a `LentTransport` (lent_transport.py) and every byte
received since the start of the request, and once the request and its response are complete the
connection is back here. Websockets, requests the parser rejects, pipelined requests that arrive in
one read and responses that close the connection leave it with aiohttp for good.

Pipelined requests are served one at a time: bytes that arrive while a response is under way wait
until it is done. A hot request must also end exactly where the received bytes end; when another
request follows it in the same read, the connection goes to aiohttp, which can split them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus

from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE
from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser

from .auth import key_from, key_ok, unauthorized
from .body import json_model
from .context import ProxyContext
from .dispatch import acquire
from .errors import ProxyError, error_body
from .forward import (
    RESPONSE_DROP,
    SMALL_BODY,
    broke_off,
    request_head,
    split_url,
    unreachable,
)
from .lent_transport import LentTransport
from .model_routes import MODEL_ROUTES, local_body, model_not_found
from .passthrough import upstream_target
from .state import ModelRuntime
from .upstream_client import (
    UpstreamError,
    UpstreamResponse,
    head_error,
    set_nodelay,
)

log = logging.getLogger(__name__)

HOT_ROUTES = frozenset(path.encode() for method, path in MODEL_ROUTES if method == "POST")
UPSTREAM_PREFIX = b"/upstream/"
MAX_HOT_BODY = 1024 * 1024
_MAX_HEAD = 64 * 1024
# Bytes a pipelining client may send ahead while a response is under way before reading pauses.
_MAX_AHEAD = 256 * 1024
# An idle keep-alive connection is closed after this long (nginx's default), on either path.
KEEPALIVE_S = float(os.environ.get("SWAPD_PROXY_KEEPALIVE_S", "75"))

# Factory of aiohttp's protocol for one connection: the AppRunner's `web.Server`.
HandlerFactory = Callable[[], asyncio.Protocol]


class HotPath:
    """The protocol factory for the listening socket, and the set of connections it holds."""

    def __init__(
        self, ctx: ProxyContext, aiohttp_handler: HandlerFactory, keepalive_s: float = KEEPALIVE_S
    ) -> None:
        self.ctx = ctx
        self.aiohttp_handler = aiohttp_handler
        self.keepalive_s = keepalive_s
        self.connections: set[HotConnection] = set()
        self.busy = 0  # requests being served
        self.closing = False
        self._all_done = asyncio.Event()

    def __call__(self) -> HotConnection:
        return HotConnection(self)

    def exchange_done(self) -> None:
        self.busy -= 1
        if self.busy == 0:
            self._all_done.set()

    async def shutdown(self, timeout: float) -> None:
        """Close idle connections now; let responses under way finish, for `timeout` at most."""
        self.closing = True
        for conn in list(self.connections):
            if conn.exchange is None and conn.borrower is None:
                conn.close()
        if self.busy:
            self._all_done.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._all_done.wait()
        for conn in list(self.connections):
            conn.close()


class _Exchange:
    """One request being served, from the moment it is admitted until its response is sent."""

    __slots__ = (
        "begun",
        "body",
        "chunked",
        "connection",
        "head",
        "headers",
        "host",
        "keep_alive",
        "method",
        "path_qs",
        "port",
        "rt",
        "streaming",
        "task",
        "upstream",
    )

    def __init__(
        self,
        rt: ModelRuntime,
        method: bytes,
        path_qs: bytes,
        headers: list[tuple[bytes, bytes]],
        connection: str | None,
        body: bytes | None,
        keep_alive: bool,
    ) -> None:
        self.rt = rt
        self.method = method
        self.path_qs = path_qs
        self.headers = headers
        self.connection = connection
        self.body = body
        self.keep_alive = keep_alive
        self.begun = False  # counted in flight (admission.begin)
        self.host = ""
        self.port = 0
        self.head = b""
        self.upstream: UpstreamResponse | None = None
        self.streaming = False  # the response head is sent, the body follows as it arrives
        self.chunked = False  # ... re-framed as chunks (its length is unknown)
        # Set once the exchange needs to wait (for the daemon, a connection, a retry, a body to
        # stream); until then it runs on the upstream connection's callbacks alone, with no task
        # and no round trip through the event loop.
        self.task: asyncio.Task[None] | None = None

    def address(self, base: str) -> None:
        """Build the upstream request for the model at `base` (its `http://host:port[/path]`)."""
        hostport, self.host, self.port, base_path = split_url(base)
        path_qs = self.path_qs
        if base_path != "/":
            path_qs = base_path.rstrip("/").encode() + path_qs
        framing = b"" if self.body is None else b"Content-Length: %d\r\n" % len(self.body)
        self.head = request_head(
            self.method, path_qs, hostport.encode(), self.headers, self.connection, framing
        )


class HotConnection(asyncio.Protocol):
    """One client connection, until it is handed to aiohttp (or closed)."""

    def __init__(self, hot: HotPath) -> None:
        self.hot = hot
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = HttpRequestParser(self)
        self.exchange: _Exchange | None = None
        self.idle_timer: asyncio.TimerHandle | None = None
        self.last_seen = 0.0
        self.writing_paused = False  # the client reads slower than we send
        self.closed = False
        # Every byte received since the current request began (what aiohttp gets on a handover).
        self.raw: list[bytes] = []
        self.raw_size = 0
        # Bytes received while a response is under way.
        self.ahead: list[bytes] = []
        self.ahead_size = 0
        self.reading_paused = False
        # A request lent to aiohttp: its handler, and the transport it was given.
        self.borrower: asyncio.Protocol | None = None
        self.lent: LentTransport | None = None
        self.given = False  # the loan turned into a gift (a websocket, say)
        self.loan_ending = False
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.body_size = 0
        self.handover: str | None = None  # why, once decided
        self.keep_lent = False  # aiohttp keeps the connection (the parser lost track of it)
        self.complete = False
        self.extra = False  # another request began after this one, in the same read
        self.keep_alive = True
        self.content_type = ""
        self.connection: str | None = None
        self.authorization = ""
        self.x_api_key: str | None = None
        self.unauthorized = False
        self.passthrough = False  # a GET to /upstream/, not a model route

    # --- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        set_nodelay(transport)
        self.hot.connections.add(self)
        self._arm_idle_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.hot.connections.discard(self)
        self._cancel_idle_timer()
        borrower = self.borrower
        if borrower is not None:
            self.borrower = self.lent = None
            borrower.connection_lost(exc)
            if not self.given:
                self.hot.exchange_done()
        ex = self.exchange
        if ex is None:
            return
        # The client went away: the upstream request is abandoned (its connection closed).
        if ex.task is not None:
            ex.task.cancel()  # the task finishes the exchange
        else:
            if ex.upstream is not None:
                ex.upstream.listener = None
                ex.upstream.close()
            self._finish(False)

    def pause_writing(self) -> None:
        if self.borrower is not None:
            self.borrower.pause_writing()
        self.writing_paused = True  # kept across a loan: a hot response after it holds too

    def resume_writing(self) -> None:
        if self.borrower is not None:
            self.borrower.resume_writing()
        self.writing_paused = False
        ex = self.exchange
        if ex is not None and ex.upstream is not None and ex.upstream.held:
            ex.upstream.release()

    def data_received(self, data: bytes) -> None:
        if self.borrower is not None and not self.loan_ending:
            self._lend_more(data)
            return
        if self.exchange is not None or self.loan_ending:
            self.ahead.append(data)
            self.ahead_size += len(data)
            if self.ahead_size > _MAX_AHEAD and not self.reading_paused:
                self.reading_paused = True
                self.transport.pause_reading()  # type: ignore[union-attr]
            return
        self.last_seen = self.loop.time()
        self.raw.append(data)
        self.raw_size += len(data)
        try:
            self.parser.feed_data(data)
        except HttpParserUpgrade:
            self.handover = self.handover or "upgrade"
            self.keep_lent = True
        except HttpParserError as exc:
            # A request aiohttp's parser answers with a 400.
            self.handover = self.handover or f"malformed: {exc}"
            self.keep_lent = True
        if self.handover is None:
            if self.complete:
                self._serve_or_hand_over()
                return
            if self.raw_size - self.body_size > _MAX_HEAD:
                self.handover = "request head too large"
                self.keep_lent = True
        if self.handover is not None:
            self._hand_over(self.handover)

    def eof_received(self) -> bool:
        return False  # a half-closed client cannot read a keep-alive answer: close

    # --- httptools callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.complete:
            self.extra = True

    def on_url(self, url: bytes) -> None:
        if self.borrower is None:
            self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.borrower is None:
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.complete or self.handover is not None or self.borrower is not None:
            return
        self.handover = self._head_refused()

    def on_body(self, body: bytes) -> None:
        if self.borrower is None:  # a lent request's body is aiohttp's alone
            self.body.append(body)
            self.body_size += len(body)

    def on_message_complete(self) -> None:
        self.complete = True

    # --- deciding -------------------------------------------------------------------------------
    def _head_refused(self) -> str | None:
        """Why this request head is not for the hot path, or None."""
        parser = self.parser
        if parser.get_http_version() != "1.1":
            return "not HTTP/1.1"
        method = parser.get_method()
        path, _, _ = self.url.partition(b"?")
        if method == b"POST" and path in HOT_ROUTES:
            self.passthrough = False
        elif method == b"GET" and path.startswith(UPSTREAM_PREFIX):
            self.passthrough = True
        else:
            return "not a route of the hot path"
        length: int | None = None
        for name, value in self.headers:
            lower = name.lower()
            if lower == b"content-type":
                self.content_type = value.decode("latin-1")
            elif lower == b"content-length":
                length = int(value)  # llhttp accepts one decimal number only
            elif lower == b"connection":
                self.connection = value.decode("latin-1")
            elif lower == b"authorization":
                self.authorization = value.decode("latin-1")
            elif lower == b"x-api-key":
                self.x_api_key = value.decode("latin-1")
            elif lower in (b"transfer-encoding", b"expect", b"upgrade"):
                return lower.decode()
        if self.passthrough:
            if length:
                return "a GET with a body"
        elif "json" not in self.content_type:
            return "not a JSON body"
        elif length is None or length > MAX_HOT_BODY:
            return "no body of known, small length"
        state = self.hot.ctx.state
        if not state.synced.is_set():
            return "routing table not yet received"
        keys = state.routes.api_keys
        if keys:
            self.unauthorized = not key_ok(key_from(self.authorization, self.x_api_key), keys)
        self.keep_alive = parser.should_keep_alive()
        return None

    def _serve_or_hand_over(self) -> None:
        raw = b"".join(self.raw) if len(self.raw) > 1 else self.raw[0]
        head_end = raw.find(b"\r\n\r\n")
        if head_end < 0 or head_end + 4 + self.body_size != len(raw):
            # More than this request was received (or it had leading line breaks): only aiohttp
            # can split the bytes.
            self.keep_lent = True
            self._hand_over("more bytes than one request")
            return
        keep_alive = self.keep_alive
        try:
            if self.unauthorized:
                raise unauthorized()
            if self.passthrough:
                taken = self._passthrough_request()
            else:
                taken = self._model_request()
            if taken is None:
                return  # lent to aiohttp
            rt, ex = taken
            self.hot.ctx.admission.reserve(rt)  # 429 past the limit
        except ProxyError as exc:
            self._answered()
            self._write_error(exc, keep_alive)
            if not keep_alive:
                self.close()
            return
        self._answered()
        self.exchange = ex
        self.hot.busy += 1
        if not rt.hot:
            # Started, joined or queued by the daemon: that waits, so in a task.
            ex.task = self.loop.create_task(self._serve_async(ex))
            return
        # Ready and not draining, checked with nothing awaited before `begin`: a drain that
        # arrives later sees this request in flight.
        self.hot.ctx.admission.begin(rt)
        ex.begun = True
        ex.address(rt.base_url)
        ex.upstream = self.hot.ctx.pool.send_nowait(
            ex.host, ex.port, ex.head, ex.body or b"", self._on_upstream
        )
        if ex.upstream is None:
            ex.task = self.loop.create_task(self._serve_async(ex))

    def _model_request(self) -> tuple[ModelRuntime, _Exchange] | None:
        """A model route: the model named in the JSON body, with its filters applied."""
        routes = self.hot.ctx.state.routes
        found = json_model(b"".join(self.body))
        route = routes.by_name.get(found.name)
        if route is None and found.name in routes.peers:
            self._hand_over("a peer's model")
            return None
        if route is None:
            raise model_not_found(found.name)
        if not route.upstream.startswith("http://"):
            self._hand_over("not a plain http upstream")
            return None
        rt = self.hot.ctx.state.runtimes[route.id]
        body = local_body(found, route)
        ex = _Exchange(rt, b"POST", self.url, self.headers, self.connection, body, self.keep_alive)
        return rt, ex

    def _passthrough_request(self) -> tuple[ModelRuntime, _Exchange] | None:
        """A GET to `/upstream/<model>/<path>` for a local model that is ready, on a path
        `upstream.ignorePaths` does not match; anything else has rules of its own (redirects,
        409s, ignored paths served outside admission) and is lent to aiohttp."""
        routes = self.hot.ctx.state.routes
        path, sep, query = self.url.partition(b"?")
        target = upstream_target(routes, path.decode("utf-8", "surrogateescape"))
        route = routes.by_name.get(target[0]) if target is not None else None
        if target is None or target[2] is None or route is None:
            self._hand_over("no local model, or a redirect")
            return None
        rest = target[2]
        rt = self.hot.ctx.state.runtimes[route.id]
        if not rt.hot or not route.upstream.startswith("http://"):
            self._hand_over("model not ready, or not a plain http upstream")
            return None
        if routes.path_ignored(urllib.parse.unquote(rest)):
            self._hand_over("an ignored path")
            return None
        path_qs = rest.encode("utf-8", "surrogateescape") + sep + query
        ex = _Exchange(rt, b"GET", path_qs, self.headers, self.connection, None, self.keep_alive)
        return rt, ex

    def _answered(self) -> None:
        """The request is taken (served or answered here): drop its bytes and parse state."""
        self.raw = []
        self.raw_size = 0
        self._reset()

    # --- lending to aiohttp ----------------------------------------------------------------------
    def _hand_over(self, why: str) -> None:
        """Lend the current request to aiohttp; keep the connection there when the parser can no
        longer follow it (the request was malformed, an upgrade, or pipelined)."""
        transport = self.transport
        assert transport is not None
        keep = self.keep_lent or self.extra
        if log.isEnabledFor(logging.DEBUG):
            path = self.url.partition(b"?")[0].decode("latin-1")  # no query: it may carry secrets
            verb = "handed" if keep else "lent"
            log.debug("hot path: connection %s to aiohttp (%s): %s", verb, why, path)
        data = b"".join(self.raw)
        self.raw = []
        if self.hot.closing:
            transport.close()
            return
        handler = self.hot.aiohttp_handler()
        if keep:
            self.hot.connections.discard(self)
            self._cancel_idle_timer()
            transport.set_protocol(handler)
            handler.connection_made(transport)
            if data:
                handler.data_received(data)
            if self.reading_paused:
                transport.resume_reading()
            return
        head_request = self.parser.get_method() == b"HEAD"
        self.lent = LentTransport(transport, head_request=head_request, on_change=self._loan_moved)
        self.borrower = handler
        self.hot.busy += 1
        handler.connection_made(self.lent)
        handler.data_received(data)
        self._loan_moved()

    def _lend_more(self, data: bytes) -> None:
        """Bytes of a lent request: aiohttp's, and read here too only to find where it ends."""
        assert self.borrower is not None and self.lent is not None
        self.borrower.data_received(data)
        if self.given:
            return
        try:
            self.parser.feed_data(data)
        except (HttpParserError, HttpParserUpgrade):
            self.extra = True
        self._loan_moved()

    def _loan_moved(self) -> None:
        """The lent request or its response moved on: end the loan once both are complete."""
        lent = self.lent
        if lent is None or self.loan_ending or self.given:
            return
        if lent.for_good or self.extra:
            # A websocket, or bytes the parser cannot split: aiohttp keeps the connection.
            self.given = True
            self.hot.exchange_done()
            if log.isEnabledFor(logging.DEBUG):
                log.debug("hot path: connection left to aiohttp")
            return
        if lent.response_done and self.complete:
            # Not from within aiohttp's write: it finishes its turn first.
            self.loan_ending = True
            self.loop.call_soon(self._end_loan)

    def _end_loan(self) -> None:
        lent, borrower = self.lent, self.borrower
        self.loan_ending = False
        if lent is None or borrower is None:
            return  # the connection was lost meanwhile
        self.lent = self.borrower = None
        lent.detached = True
        try:
            borrower.connection_lost(None)  # aiohttp's handler lets go of it
        except Exception:
            log.exception("hot path: aiohttp did not let go of a connection")
            self.close()
        self.hot.exchange_done()
        if self.closed or self.hot.closing:
            self.close()
            return
        if lent.reading_paused:
            self.transport.resume_reading()  # type: ignore[union-attr]
        if log.isEnabledFor(logging.DEBUG):
            log.debug("hot path: connection back from aiohttp")
        self._answered()
        self.last_seen = self.loop.time()
        self._next_request()

    # --- serving --------------------------------------------------------------------------------
    def _on_upstream(self) -> None:
        """The upstream's response moved on (callback mode): relay what it can, and hand the
        exchange to a task only when it must wait (the retry of a kept-alive connection)."""
        ex = self.exchange
        if ex is None or ex.upstream is None:
            return
        try:
            self._advance(ex, ex.upstream)
        except Exception:
            # Runs inside the upstream connection's callbacks: whatever went wrong must end this
            # exchange here, not take that connection down with an unanswered client.
            log.exception("hot path: request to %s failed", ex.rt.id)
            ex.upstream.listener = None
            ex.upstream.close()
            self.close()
            self._finish(False)

    def _advance(self, ex: _Exchange, upstream: UpstreamResponse) -> None:
        if not upstream.head_done:
            if upstream.done:  # failed before its head
                upstream.listener = None
                if upstream.retryable:
                    # The keep-alive race: the upstream had closed the idle connection.
                    ex.upstream = None
                    ex.task = self.loop.create_task(self._serve_async(ex))
                    return
                assert upstream.error is not None
                error = head_error(upstream.error)
                self._write_error(unreachable(ex.rt.id, error), ex.keep_alive)
                self._finish(ex.keep_alive)
            return
        length = upstream.content_length
        if length is not None and length <= SMALL_BODY:
            if not upstream.done:
                return  # the rest of the body is on its way
            upstream.listener = None
            if upstream.error is not None:
                self._write_error(broke_off(ex.rt.id, upstream.error), ex.keep_alive)
            else:
                data = upstream.take()
                self._write(self._response_head(upstream, ex.keep_alive, len(data)) + data)
            self._finish(ex.keep_alive)
            return
        # A body to stream: relayed from the upstream connection's callbacks as it arrives, with
        # no task in between (each token of a generation reaches the client one turn sooner).
        if not ex.streaming:
            ex.streaming = True
            ex.chunked = length is None
            self._write(self._response_head(upstream, ex.keep_alive, length))
        data = upstream.take()
        if data:
            self._write(b"%x\r\n%b\r\n" % (len(data), data) if ex.chunked else data)
        if upstream.done:
            upstream.listener = None
            keep_alive = ex.keep_alive
            if upstream.error is not None:
                log.warning("upstream %s broke off a response: %r", ex.rt.id, upstream.error)
                # A body of fixed length can only say "truncated" by closing; a chunked one ends.
                keep_alive = keep_alive and ex.chunked
            if ex.chunked:
                self._write(b"0\r\n\r\n")
            self._finish(keep_alive)
        elif self.writing_paused and not upstream.held:
            upstream.hold()  # the client is slower than the upstream: resume_writing releases

    async def _serve_async(self, ex: _Exchange) -> None:
        """The parts of an exchange that wait (the daemon's `Ensure`, a new upstream connection);
        once the response head is in, the upstream connection's callbacks take over."""
        try:
            if not ex.begun:
                base = await acquire(self.hot.ctx, ex.rt)  # counts it in flight once ready
                ex.begun = True
                ex.address(base)
            if ex.upstream is None:
                try:
                    ex.upstream = await self.hot.ctx.pool.request(
                        ex.host, ex.port, ex.head, ex.body
                    )
                except UpstreamError as exc:
                    raise unreachable(ex.rt.id, exc) from exc
        except ProxyError as exc:
            self._write_error(exc, ex.keep_alive)
            self._finish(ex.keep_alive)
            return
        except asyncio.CancelledError:  # the client went away
            self._finish(False)
            return
        except Exception:
            log.exception("hot path: request to %s failed", ex.rt.id)
            self.close()
            self._finish(False)
            return
        ex.task = None
        ex.upstream.listener = self._on_upstream
        self._on_upstream()  # what has arrived already; the rest through the callbacks

    @staticmethod
    def _response_head(upstream: UpstreamResponse, keep_alive: bool, length: int | None) -> bytes:
        """The head aiohttp would have sent for this upstream response: its headers minus
        hop-by-hop ones, then the framing (`length` None: chunked) and aiohttp's defaults."""
        status = upstream.status
        out = [b"HTTP/1.1 %d %s\r\n" % (status, upstream.reason.encode("latin-1"))]
        has_type = has_date = has_server = sse = False
        for key, value in upstream.headers:
            lower = key.lower()
            if lower in RESPONSE_DROP:
                continue
            if lower == "content-type":
                has_type = True
                sse = value.startswith("text/event-stream")
            elif lower == "date":
                has_date = True
            elif lower == "server":
                has_server = True
            out.append(b"%s: %s\r\n" % (key.encode("latin-1"), value.encode("latin-1")))
        empty = status in (204, 304)
        if not empty and length != 0 and not has_type:
            # What aiohttp's responses say of a body of unknown type (RFC 9110 §8.3).
            out.append(b"Content-Type: application/octet-stream\r\n")
        if not has_date:
            out.append(b"Date: %s\r\n" % rfc822_formatted_time().encode())
        if not has_server:
            out.append(_SERVER)
        if sse:
            out.append(b"X-Accel-Buffering: no\r\n")
        if not keep_alive:
            out.append(b"Connection: close\r\n")
        if empty:
            out.append(b"\r\n")
        elif length is None:
            out.append(b"Transfer-Encoding: chunked\r\n\r\n")
        else:
            out.append(b"Content-Length: %d\r\n\r\n" % length)
        return b"".join(out)

    def _write_error(self, exc: ProxyError, keep_alive: bool) -> None:
        body = error_body(exc.status, exc.message, exc.code, exc.log_tail)
        out = [b"HTTP/1.1 %d %s\r\n" % (exc.status, _reason(exc.status))]
        for key, value in (exc.headers or {}).items():
            out.append(b"%s: %s\r\n" % (key.encode("latin-1"), value.encode("latin-1")))
        out.append(b"Content-Type: application/json\r\n")
        out.append(b"Date: %s\r\n" % rfc822_formatted_time().encode())
        out.append(_SERVER)
        if not keep_alive:
            out.append(b"Connection: close\r\n")
        out.append(b"Content-Length: %d\r\n\r\n" % len(body))
        out.append(body)
        self._write(b"".join(out))

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None and not self.closed and not transport.is_closing():
            transport.write(data)

    def _finish(self, keep_alive: bool) -> None:
        """The exchange is over: count it out, then keep the connection for the next request or
        close it."""
        ex = self.exchange
        if ex is None:
            return
        self.exchange = None
        admission = self.hot.ctx.admission
        if ex.begun:
            admission.end(ex.rt)
        admission.release(ex.rt)
        self.hot.exchange_done()
        if self.closed:
            return
        if not keep_alive or self.hot.closing:
            self.close()
            return
        self.last_seen = self.loop.time()
        if self.ahead or self.reading_paused:
            # Not from within the upstream's callbacks: the next request may need its connection.
            self.loop.call_soon(self._next_request)

    def _next_request(self) -> None:
        if self.closed or self.exchange is not None:
            return
        if self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]
        if self.ahead:
            ahead = b"".join(self.ahead)
            self.ahead = []
            self.ahead_size = 0
            self.data_received(ahead)

    # --- idle connections -----------------------------------------------------------------------
    def _arm_idle_timer(self) -> None:
        # One timer per connection, re-armed when it fires, rather than one per request.
        if self.hot.keepalive_s > 0:
            self.last_seen = self.loop.time()
            self.idle_timer = self.loop.call_later(self.hot.keepalive_s, self._check_idle)

    def _check_idle(self) -> None:
        """Close the connection once it has been idle (or stalled mid-request) for keepalive_s."""
        self.idle_timer = None
        if self.closed:
            return
        keepalive = self.hot.keepalive_s
        if self.exchange is not None or self.borrower is not None:
            # A response under way (a generation may stream for minutes) is not idleness; a
            # connection aiohttp has is aiohttp's to time out.
            self.idle_timer = self.loop.call_later(keepalive, self._check_idle)
            return
        left = self.last_seen + keepalive - self.loop.time()
        if left <= 0:
            self.close()
        else:
            self.idle_timer = self.loop.call_later(left, self._check_idle)

    def _cancel_idle_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def close(self) -> None:
        self._cancel_idle_timer()
        if self.transport is not None and not self.closed:
            with contextlib.suppress(RuntimeError):
                self.transport.close()


_SERVER = b"Server: %s\r\n" % SERVER_SOFTWARE.encode()


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""
