"""A lean HTTP/1.1 client for local `http://` upstreams (`upstream.LeanTransport`).

aiohttp's client is general (cookies, redirects, tracing, auth, proxies, ...) and costs most of the
proxy's CPU per request; this one does only what a reverse proxy needs: pooled keep-alive
connections per upstream, the request head and a bytes body in one write (or a streamed body,
chunked, with write flow control), and the body handed over as it arrives, with read flow control
so a slow client slows the upstream instead of filling memory. Parsing the response (status line,
headers, content-length, chunked or until-close framing, trailers) is llhttp's, through httptools.
Websockets, TLS and peers use aiohttp. A response head is limited to `_MAX_HEAD` bytes however
it arrives (counted in llhttp's callbacks, and per read while the head is incomplete).

A kept-alive connection the upstream closed while idle is retried once on a fresh one when nothing
of the response had arrived (the usual keep-alive race); anything else surfaces as
`UpstreamError` (before the head, including a response llhttp rejects) or `UpstreamBroken`
(mid-body).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

from httptools import HttpParserError, HttpParserUpgrade, HttpResponseParser

from ..ipc.routing_table import Timeouts
from .upstream_response import UpstreamBroken, UpstreamError, UpstreamResponse
from .upstream_timeouts import HeadTimeout, expired, head_within, set_keepalive

__all__ = ["UpstreamBroken", "UpstreamError", "UpstreamPool", "UpstreamResponse"]

# llhttp sets no limit of its own. nginx refuses an upstream head over its proxy_buffer_size (4 or
# 8 KiB by default); four times that leaves room for big cookies and policies.
_MAX_HEAD = 32 * 1024
_IDLE_PER_HOST = 256


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Small writes (a request head, an SSE event) go out at once, not after Nagle's wait."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def head_error(error: BaseException) -> UpstreamError:
    """What a failure before the response head means, as the client's 502 says it."""
    if isinstance(error, UpstreamError):
        return error
    if isinstance(error, OSError):
        return UpstreamError(str(error))
    return UpstreamError(f"malformed response: {error}")


class _OutOfStep(Exception):
    """Bytes from the upstream that answer no request: the connection cannot be trusted."""


class _HeadTooLarge(UpstreamError):
    def __init__(self) -> None:
        super().__init__(f"response head larger than {_MAX_HEAD} bytes")


class _Conn(asyncio.Protocol):
    """One upstream connection, and the httptools callbacks for the responses read from it."""

    def __init__(self, pool: UpstreamPool, key: tuple[str, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.parser = HttpResponseParser(self)
        # After a HEAD, llhttp still expects the body its Content-Length announces (httptools
        # cannot tell it otherwise): the next exchange starts on a fresh parser.
        self.parser_spent = False
        self.response: UpstreamResponse | None = None
        self.head_waiter: asyncio.Future[UpstreamResponse] | None = None
        self.in_head = False
        self.head_size = 0
        self.head_read = 0
        self.reason = b""
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.interim = False
        self.until_close = False
        self.received_any = False
        self.reused = False
        self.head_request = False
        self.keep_alive = True
        self.paused = False
        self.write_paused: asyncio.Future[None] | None = None
        self.closed = False
        # In the pool since (loop time), and how long it may stay there (timeouts.idleConn).
        self.idle_since = 0.0
        self.idle_limit = 0.0

    # --- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        set_nodelay(transport)

    def pause_writing(self) -> None:
        if self.write_paused is None:
            self.write_paused = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        waiter, self.write_paused = self.write_paused, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        self.resume_writing()
        error = exc or ConnectionResetError("upstream closed the connection")
        if self.head_waiter is not None and not self.head_waiter.done():
            self.head_waiter.set_exception(head_error(error))
        response = self.response
        if response is not None and not response.done:
            # httptools has no end-of-input call: a body without Content-Length or chunked
            # framing ends here by definition; any other ends too early.
            response._finish(None if self.until_close else error)

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self.parser.feed_data(data)
        except HttpParserUpgrade:
            # The lean path never asks for an upgrade (forward drops Upgrade and Connection).
            self._fail(UpstreamError("upstream switched protocols unasked"))
            return
        except HttpParserError as exc:
            cause = exc.__context__  # what a callback raised
            self._fail(cause if isinstance(cause, _OutOfStep | _HeadTooLarge) else exc)
            return
        if self.head_waiter is not None:
            self.head_read += len(data)
        if self.head_waiter is not None and self.head_read > _MAX_HEAD:
            # A head still incomplete after more than the limit (llhttp reports a header only
            # once it is whole; complete ones are counted in the callbacks, whatever the reads).
            self._fail(_HeadTooLarge())

    # --- httptools callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.response is None or self.response.done:
            raise _OutOfStep("upstream sent bytes that answer no request")
        self.in_head = True
        self.reason = b""
        self.raw_headers = []

    def _count_head(self, size: int) -> None:
        self.head_size += size
        if self.head_size > _MAX_HEAD:
            raise _HeadTooLarge()

    def on_status(self, reason: bytes) -> None:
        self._count_head(len(reason))
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        if self.in_head:  # not a trailer: those are dropped
            self.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.in_head = False
        status = self.parser.get_status_code()
        if status < 200:
            # 100 Continue, 103 Early Hints: the real head follows. (101 ends in
            # HttpParserUpgrade or HttpParserError, which fail the exchange.)
            self.interim = True
            return
        response = self.response
        assert response is not None
        response.status = status
        response.reason = self.reason.decode("latin-1")
        headers = response.headers
        length: int | None = None
        chunked = False
        for name, value in self.raw_headers:
            key = name.decode("latin-1")
            text = value.rstrip(b" \t").decode("latin-1")  # llhttp keeps trailing whitespace
            headers.append((key, text))
            lower = key.lower()
            if lower == "content-length":
                length = int(text)  # llhttp already rejected anything but one decimal number
            elif lower == "transfer-encoding":
                chunked = text.rpartition(",")[2].strip().lower() == "chunked"
        if status in (204, 304):
            length = 0
        elif chunked:
            length = None
        response.content_length = length
        response.chunked = chunked
        self.keep_alive = self.parser.should_keep_alive()
        self.until_close = length is None and not chunked and not self.head_request
        waiter, self.head_waiter = self.head_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(response)
        if self.head_request:
            self.parser_spent = True
            self._complete()

    def on_body(self, body: bytes) -> None:
        response = self.response
        if response is None or response.done:
            raise _OutOfStep("upstream sent a body that answers no request")
        response._feed(body)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
        elif self.response is not None:
            self._complete()

    # --- outcome --------------------------------------------------------------------------------
    def _complete(self) -> None:
        response, self.response = self.response, None
        if response is not None:
            response._finish()
        if self.keep_alive and not self.closed:
            self.resume()
            self.pool._release(self)
        else:
            self.abort()

    def _fail(self, error: Exception) -> None:
        waiter, self.head_waiter = self.head_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(head_error(error))
        response = self.response
        if response is not None and not response.done:
            response._finish(error)
        self.abort()

    # --- control --------------------------------------------------------------------------------
    def pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    def abort(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.abort()
        self.pool._forget(self)

    async def drain(self) -> None:
        if self.write_paused is not None:
            await self.write_paused
        if self.closed:
            raise UpstreamError("upstream closed the connection while the body was sent")


class UpstreamPool:
    """Keep-alive connections per (host, port); unlimited in number, like `limit=0`."""

    def __init__(self, connect_timeout: float = 10.0) -> None:
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        # For requests that carry no `Timeouts` of their own.
        self._connect_timeout = connect_timeout

    def close(self) -> None:
        for idle in list(self._idle.values()):
            for conn in list(idle):
                conn.abort()
        self._idle.clear()

    def _release(self, conn: _Conn) -> None:
        idle = self._idle.setdefault(conn.key, [])
        now = asyncio.get_running_loop().time()
        # The oldest idle connection is at the bottom: close it once it is past its limit.
        if idle and expired(idle[0], now):
            idle[0].abort()
        if len(idle) < _IDLE_PER_HOST:
            conn.idle_since = now
            idle.append(conn)
        else:
            conn.abort()

    def _take(self, key: tuple[str, int]) -> _Conn | None:
        """A pooled connection to `key` that has not sat idle past its `idleConn`."""
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not expired(conn, asyncio.get_running_loop().time()):
                return conn
            conn.abort()
        return None

    def _forget(self, conn: _Conn) -> None:
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    async def _connect(self, key: tuple[str, int], timeouts: Timeouts | None) -> _Conn:
        loop = asyncio.get_running_loop()
        limit = timeouts.connect if timeouts is not None else self._connect_timeout
        try:
            async with asyncio.timeout(limit or None):
                _, conn = await loop.create_connection(lambda: _Conn(self, key), key[0], key[1])
        except (OSError, TimeoutError) as exc:
            reason = str(exc) or f"no connection within {limit:g}s"  # a TimeoutError says nothing
            raise UpstreamError(f"cannot connect to {key[0]}:{key[1]}: {reason}") from exc
        if timeouts is not None and conn.transport is not None:
            set_keepalive(conn.transport, timeouts.keepalive)
        return conn

    async def request(
        self,
        host: str,
        port: int,
        head: bytes,
        body: bytes | AsyncIterator[bytes] | None,
        *,
        head_request: bool = False,
        chunked: bool = False,
        timeouts: Timeouts | None = None,
    ) -> UpstreamResponse:
        """Send `head` (request line and headers, ending with the blank line) and `body`.

        A bytes body must already be announced by a Content-Length in `head`; an iterator body is
        sent as is, or chunk-framed when `chunked` (the head then says chunked encoding).
        `head_request`: the request is a HEAD, so the response has no body whatever it announces.
        `timeouts`: the model's (connect, keepalive, responseHeader, idleConn); None: connect
        within the pool's default, no other limit.
        """
        key = (host, port)
        retry = True
        while True:
            conn = self._take(key) or await self._connect(key, timeouts)
            reused = conn.reused
            if timeouts is not None:
                conn.idle_limit = timeouts.idle_conn
            head_wait = timeouts.response_header if timeouts is not None else 0.0
            try:
                return await self._exchange(conn, head, body, head_request, chunked, head_wait)
            except UpstreamError as exc:
                if (
                    reused
                    and retry
                    and not isinstance(exc, HeadTimeout)
                    and not conn.received_any
                    and not _is_stream(body)
                ):
                    retry = False
                    continue
                raise

    def _start(self, conn: _Conn, head_request: bool) -> UpstreamResponse:
        """Make `conn` ready for the response to a request about to be written on it."""
        if conn.parser_spent:
            conn.parser = HttpResponseParser(conn)
            conn.parser_spent = False
        conn.received_any = False
        conn.head_request = head_request
        conn.head_size = 0
        conn.head_read = 0
        conn.interim = False
        conn.until_close = False
        response = UpstreamResponse(conn, conn.reused)
        conn.reused = True
        conn.response = response
        return response

    async def _exchange(
        self,
        conn: _Conn,
        head: bytes,
        body: Any,
        head_request: bool,
        chunked: bool,
        head_wait: float = 0.0,
    ) -> UpstreamResponse:
        if conn.closed or conn.transport is None:
            raise UpstreamError("connection closed")
        self._start(conn, head_request)
        waiter: asyncio.Future[UpstreamResponse] = asyncio.get_running_loop().create_future()
        conn.head_waiter = waiter
        transport = conn.transport
        try:
            if body is None:
                transport.write(head)
            elif isinstance(body, bytes | bytearray):
                transport.write(head + body if len(body) < 65536 else head)
                if len(body) >= 65536:
                    transport.write(body)
            else:
                transport.write(head)
                async for chunk in body:
                    if chunk:
                        transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
                        await conn.drain()
                    if waiter.done():
                        break  # the upstream answered early (e.g. 413): stop sending
                else:
                    if chunked:
                        transport.write(b"0\r\n\r\n")
            return await (head_within(waiter, head_wait) if head_wait else waiter)
        except BaseException:
            conn.head_waiter = None
            conn.abort()
            raise


def _is_stream(body: object) -> bool:
    return body is not None and not isinstance(body, bytes | bytearray)
