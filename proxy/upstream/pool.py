"""A lean HTTP/1.1 client for local `http://` upstreams (`transport.LeanTransport`).

aiohttp's client is general (cookies, redirects, tracing, auth, proxies, ...) and costs most of the
proxy's CPU per request; this one does only what a reverse proxy needs: pooled keep-alive
connections per upstream, the request head and a bytes body in one write (or a streamed body,
chunked, with write flow control), and the body handed over as it arrives, with read flow control
so a slow client slows the upstream instead of filling memory. Parsing the response (status line,
headers, content-length, chunked or until-close framing, trailers) is llhttp's, through httptools.
Websockets, TLS and peers use aiohttp. One connection and its parsing is `conn.py`'s; a
response head is limited to `conn.MAX_HEAD` bytes however it arrives.

Reuse and retry follow Go's and nginx's rule: a request is sent again, once, on a fresh
connection only when no byte of it can have been processed by the upstream.
* An idle connection is not handed out once the upstream has closed it, even when the loop has
  not yet seen the close: it is polled for readability first (an idle connection that is readable
  holds an end of file, or bytes that answer nothing). llama.cpp's server closes its connection
  after every streamed response without saying `Connection: close`.
* A kept-alive connection found closed before the request was written is retried, whatever the
  body (nothing of a stream was read yet).
* One that the upstream resets after the request was written, before any byte of the response,
  is retried with a replayable body (none, or bytes): a socket closed with bytes unread in it is
  reset, not closed (RFC 1122 §4.2.2.13), so the upstream closed it without reading the request
  (llama-server closing after a streamed answer, a moment after the next request came).
* One that closes cleanly after the request was written and before any byte of the response is
  retried only for an idempotent method (`GET`, `HEAD`, `OPTIONS`, `TRACE`) with a replayable
  body: the upstream read the request, and a `POST` it may have acted on is never sent twice.
`transport.py` reads small streamed bodies with a Content-Length whole first (`REPLAYABLE`), so
they go as bytes and can be replayed.
Anything else surfaces as `UpstreamError` (before the head, including a response llhttp
rejects) or `UpstreamBroken` (mid-body).
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import AsyncIterator
from typing import Any

from ...ipc.routing_table import Timeouts
from ..floor.errors import HeadTimeout, UpstreamError, UpstreamRefused
from .conn import UpstreamConn
from .response import UpstreamResponse
from .timeouts import expired, head_within, set_keepalive

__all__ = ["UpstreamPool", "UpstreamResponse"]

_IDLE_PER_HOST = 256
# Methods whose request may be sent twice (RFC 9110 §9.2.2; Go's `isReplayable` reads the same).
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class UpstreamPool:
    """Keep-alive connections per (host, port); unlimited in number, like `limit=0`."""

    def __init__(self, connect_timeout: float = 10.0) -> None:
        self._idle: dict[tuple[str, int], list[UpstreamConn]] = {}
        # For requests that carry no `Timeouts` of their own.
        self._connect_timeout = connect_timeout
        self._loop: asyncio.AbstractEventLoop | None = None

    def _running(self) -> asyncio.AbstractEventLoop:
        # The loop, found once: the pool may be made before its loop runs (the benchmarks' floor).
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def close(self) -> None:
        for idle in list(self._idle.values()):
            for conn in list(idle):
                conn.abort()
        self._idle.clear()

    def release(self, conn: UpstreamConn) -> None:
        idle = self._idle.setdefault(conn.key, [])
        now = self._running().time()
        # The oldest idle connection is at the bottom: close it once it is past its limit.
        if idle and expired(idle[0], now):
            idle[0].abort()
        if len(idle) < _IDLE_PER_HOST:
            conn.idle_since = now
            idle.append(conn)
        else:
            conn.abort()

    def _take(self, key: tuple[str, int]) -> UpstreamConn | None:
        """A pooled connection to `key` that has not sat idle past its `idleConn`."""
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not expired(conn, self._running().time()) and not _readable(conn):
                return conn
            conn.abort()
        return None

    def forget(self, conn: UpstreamConn) -> None:
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    async def _connect(self, key: tuple[str, int], timeouts: Timeouts | None) -> UpstreamConn:
        loop = asyncio.get_running_loop()
        limit = timeouts.connect if timeouts is not None else self._connect_timeout
        try:
            async with asyncio.timeout(limit or None):
                _, conn = await loop.create_connection(
                    lambda: UpstreamConn(self, key), key[0], key[1]
                )
        except ConnectionRefusedError as exc:
            raise UpstreamRefused(f"cannot connect to {key[0]}:{key[1]}: {exc}") from exc
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
        idempotent: bool = False,
        timeouts: Timeouts | None = None,
    ) -> UpstreamResponse:
        """Send `head` (request line and headers, ending with the blank line) and `body`.

        A bytes body must already be announced by a Content-Length in `head`; an iterator body is
        sent as is, or chunk-framed when `chunked` (the head then says chunked encoding).
        `head_request`: the request is a HEAD, so the response has no body whatever it announces.
        `idempotent`: its method may be sent twice (`IDEMPOTENT`), so a reused connection that
        closes after the request was written and before any response byte is retried.
        `timeouts`: the model's (connect, keepalive, responseHeader, idleConn); None: connect
        within the pool's default, no other limit.
        """
        key = (host, port)
        retry = True
        head_wait = timeouts.response_header if timeouts is not None else 0.0
        replayable = not _is_stream(body)
        while True:
            # The retry takes a fresh connection: the other idle ones to this upstream are as old
            # as the one that failed (a restarted upstream closed them all).
            conn = (self._take(key) if retry else None) or await self._connect(key, timeouts)
            reused = conn.reused
            if timeouts is not None:
                conn.idle_limit = timeouts.idle_conn
            # The exchange, written out here rather than in a coroutine of its own: one await
            # less on every request.
            transport = conn.transport
            if conn.closed or transport is None:
                # Found closed before anything was sent: nothing of this request was read (of a
                # streamed body either), so it is retried.
                if reused and retry:
                    retry = False
                    continue
                raise UpstreamError("connection closed")
            conn.begin(head_request)
            waiter: asyncio.Future[UpstreamResponse] = self._running().create_future()
            conn.head_waiter = waiter
            written = False
            try:
                if body is None:
                    transport.write(head)
                elif isinstance(body, bytes | bytearray):
                    transport.write(head + body if len(body) < 65536 else head)
                    if len(body) >= 65536:
                        transport.write(body)
                else:
                    transport.write(head)
                    await _send_stream(conn, body, chunked, waiter)
                written = True
                return await (head_within(waiter, head_wait) if head_wait else waiter)
            except UpstreamError as exc:
                conn.head_waiter = None
                conn.abort()
                if (
                    reused
                    and retry
                    and not isinstance(exc, HeadTimeout)
                    and not conn.received_any
                    and replayable
                    and (idempotent or not written or conn.reset)
                ):
                    retry = False
                    continue
                raise
            except BaseException:
                conn.head_waiter = None
                conn.abort()
                raise


async def _send_stream(
    conn: UpstreamConn, body: Any, chunked: bool, waiter: asyncio.Future[UpstreamResponse]
) -> None:
    """A streamed request body, chunk-framed when `chunked`; it stops early when the upstream
    answers before the body is all sent (a 413, say)."""
    transport = conn.transport
    assert transport is not None
    async for chunk in body:
        if chunk:
            transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
            await conn.drain()
        if waiter.done():
            return
    if chunked:
        transport.write(b"0\r\n\r\n")


def _is_stream(body: object) -> bool:
    return body is not None and not isinstance(body, bytes | bytearray)


def _readable(conn: UpstreamConn) -> bool:
    """Whether an idle connection has something to read: the upstream's end of file (it closed
    the connection, and the loop has not yet been told) or bytes that answer no request. Either
    way it must not carry another request."""
    fd = conn.fd
    if fd < 0:
        return True
    try:
        return bool(select.select((fd,), (), (), 0)[0])
    except (OSError, ValueError):
        return True
