"""A lean HTTP/1.1 client for local `http://` upstreams: the proxy's hot path.

aiohttp's client is general (cookies, redirects, tracing, auth, proxies, ...) and costs most of the
proxy's CPU per request; this one does only what a reverse proxy needs: pooled keep-alive
connections per upstream, the request head and a bytes body in one write (or a streamed body,
chunked, with write flow control), the response head parsed once, and the body handed over as it
arrives (content-length, chunked or until-close), with read flow control so a slow client slows the
upstream instead of filling memory. Websockets, TLS and peers use aiohttp.

A kept-alive connection the upstream closed while idle is retried once on a fresh one when nothing
of the response had arrived (the usual keep-alive race); anything else surfaces as
`UpstreamError` (before the head) or `UpstreamBroken` (mid-body).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

_HIGH_WATER = 1024 * 1024  # pause reading the upstream past this much undelivered body
_MAX_HEAD = 64 * 1024
_IDLE_PER_HOST = 256


class UpstreamError(Exception):
    """The upstream failed before sending a complete response head."""


class UpstreamBroken(Exception):
    """The upstream broke off the response body."""


class UpstreamResponse:
    __slots__ = (
        "_conn",
        "_parts",
        "_size",
        "_waiter",
        "chunked",
        "content_length",
        "done",
        "error",
        "headers",
        "reason",
        "status",
    )

    def __init__(self, conn: _Conn) -> None:
        self._conn = conn
        self.status = 0
        self.reason = ""
        self.headers: list[tuple[str, str]] = []
        self.content_length: int | None = None
        self.chunked = False
        self._parts: deque[bytes] = deque()
        self._size = 0
        self._waiter: asyncio.Future[None] | None = None
        self.done = False
        self.error: Exception | None = None

    # called by the connection
    def _feed(self, data: bytes) -> None:
        if data:
            self._parts.append(data)
            self._size += len(data)
            if self._size > _HIGH_WATER:
                self._conn.pause()
        self._wake()

    def _finish(self, error: Exception | None = None) -> None:
        self.done = True
        self.error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # used by the proxy
    async def read_chunk(self) -> bytes:
        """Everything that has arrived since the last call; b"" at the end of the body."""
        while not self._parts:
            if self.done:
                if self.error is not None:
                    raise UpstreamBroken(str(self.error)) from self.error
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        self._parts.clear()
        self._size = 0
        self._conn.resume()
        return data

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.read_chunk():
            parts.append(chunk)
        return b"".join(parts)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        while chunk := await self.read_chunk():
            yield chunk

    def close(self) -> None:
        """Abandon the response: the connection cannot be reused unless the body was complete."""
        if not self.done:
            self._conn.abort()


class _Conn(asyncio.Protocol):
    def __init__(self, pool: UpstreamPool, key: tuple[str, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.response: UpstreamResponse | None = None
        self.head_waiter: asyncio.Future[UpstreamResponse] | None = None
        self.received_any = False
        self.reused = False
        self.head_request = False
        self.keep_alive = True
        self.remaining = 0  # content-length body bytes still to come
        self.chunk_left = -1  # chunked: bytes left in the current chunk (-1: expect a size line)
        self.until_close = False
        self.paused = False
        self.write_paused: asyncio.Future[None] | None = None
        self.closed = False

    # --- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

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
            self.head_waiter.set_exception(UpstreamError(str(error)))
        response = self.response
        if response is not None and not response.done:
            if self.until_close:
                response._finish()
            else:
                response._finish(error)

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        if self.response is None:
            self.abort()  # bytes nobody asked for: the connection is out of step
        elif self.head_waiter is not None:
            if self.buf:
                self.buf += data
                data = bytes(self.buf)
                self.buf.clear()
            self._parse_head(data)
        else:
            self._body(data)

    # --- parsing --------------------------------------------------------------------------------
    def _parse_head(self, data: bytes) -> None:
        """Parse the response head at the start of `data` (what arrived so far, `buf` empty)."""
        while True:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                if len(data) > _MAX_HEAD:
                    self._fail_head(UpstreamError("response head too large"))
                else:
                    self.buf += data
                return
            rest = data[end + 4 :]
            lines = data[:end].decode("latin-1").split("\r\n")
            parts = lines[0].split(" ", 2)
            try:
                status = int(parts[1])
            except (IndexError, ValueError):
                self._fail_head(UpstreamError(f"bad status line {lines[0]!r}"))
                return
            if 100 <= status < 200 and status != 101:
                data = rest  # an interim response (100 Continue): the real one follows
                continue
            response = self.response
            assert response is not None
            response.status = status
            response.reason = parts[2] if len(parts) > 2 else ""
            headers = response.headers
            length: int | None = None
            chunked = False
            connection = ""
            for line in lines[1:]:
                name, _, value = line.partition(":")
                value = value.strip()
                headers.append((name, value))
                lower = name.lower()
                if lower == "content-length":
                    try:
                        length = int(value)
                    except ValueError:
                        self._fail_head(UpstreamError(f"bad Content-Length {value!r}"))
                        return
                elif lower == "transfer-encoding":
                    chunked = "chunked" in value.lower()
                elif lower == "connection":
                    connection = value.lower()
            self.keep_alive = parts[0] == "HTTP/1.1" and "close" not in connection
            if chunked:
                length = None
            response.content_length = length
            response.chunked = chunked
            waiter, self.head_waiter = self.head_waiter, None
            if self.head_request or status in (204, 304):
                # No body follows, whatever Content-Length says (for HEAD it is the GET's size).
                if not self.head_request:
                    response.content_length = 0
                self._complete()
            elif chunked:
                self.chunk_left = -1
            elif length is not None:
                self.remaining = length
                if length == 0:
                    self._complete()
            else:
                self.until_close = True
                self.keep_alive = False
            if waiter is not None and not waiter.done():
                waiter.set_result(response)
            if rest and not response.done:
                self._body(rest)
            return

    def _fail_head(self, error: Exception) -> None:
        waiter, self.head_waiter = self.head_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self.abort()

    def _body(self, data: bytes) -> None:
        response = self.response
        if response is None or response.done:
            return
        if self.until_close:
            response._feed(data)
        elif not response.chunked:
            take = data[: self.remaining]
            self.remaining -= len(take)
            response._feed(take)
            if self.remaining == 0:
                self._complete()
        else:
            self._chunks(data, response)

    def _chunks(self, data: bytes, response: UpstreamResponse) -> None:
        buf = self.buf
        buf += data
        out = []
        pos = 0
        while True:
            if self.chunk_left > 0:
                take = min(self.chunk_left, len(buf) - pos)
                if take <= 0:
                    break
                out.append(bytes(buf[pos : pos + take]))
                pos += take
                self.chunk_left -= take
                if self.chunk_left == 0:
                    self.chunk_left = -2  # expect the CRLF after the data
                continue
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                break
            if self.chunk_left == -2:
                pos = line_end + 2
                self.chunk_left = -1
                continue
            if self.chunk_left == -3:  # trailers, until an empty line
                if line_end == pos:
                    del buf[:]
                    if out:
                        response._feed(b"".join(out))
                    self._complete()
                    return
                pos = line_end + 2
                continue
            size_text = bytes(buf[pos:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                del buf[:]
                response._finish(UpstreamBroken(f"bad chunk size {size_text!r}"))
                self.abort()
                return
            pos = line_end + 2
            self.chunk_left = size if size else -3
        del buf[:pos]
        if out:
            response._feed(out[0] if len(out) == 1 else b"".join(out))

    def _complete(self) -> None:
        response = self.response
        self.response = None
        if response is not None:
            response._finish()
        if self.keep_alive and not self.closed and not self.buf:
            self.resume()
            self.pool._release(self)
        else:
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
        self._connect_timeout = connect_timeout

    def close(self) -> None:
        for idle in list(self._idle.values()):
            for conn in list(idle):
                conn.abort()
        self._idle.clear()

    def _release(self, conn: _Conn) -> None:
        idle = self._idle.setdefault(conn.key, [])
        if len(idle) < _IDLE_PER_HOST:
            idle.append(conn)
        else:
            conn.abort()

    def _forget(self, conn: _Conn) -> None:
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    async def _connect(self, key: tuple[str, int]) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, conn = await loop.create_connection(lambda: _Conn(self, key), key[0], key[1])
        except (OSError, TimeoutError) as exc:
            raise UpstreamError(f"cannot connect to {key[0]}:{key[1]}: {exc}") from exc
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
    ) -> UpstreamResponse:
        """Send `head` (request line and headers, ending with the blank line) and `body`.

        A bytes body must already be announced by a Content-Length in `head`; an iterator body is
        sent as is, or chunk-framed when `chunked` (the head then says chunked encoding).
        """
        key = (host, port)
        retry = True
        while True:
            idle = self._idle.get(key)
            conn = idle.pop() if idle else await self._connect(key)
            reused = conn.reused
            conn.reused = True
            try:
                return await self._exchange(conn, head, body, head_request, chunked)
            except UpstreamError:
                if reused and retry and not conn.received_any and not _is_stream(body):
                    retry = False
                    continue
                raise

    async def _exchange(
        self, conn: _Conn, head: bytes, body: Any, head_request: bool, chunked: bool
    ) -> UpstreamResponse:
        if conn.closed or conn.transport is None:
            raise UpstreamError("connection closed")
        loop = asyncio.get_running_loop()
        conn.received_any = False
        conn.head_request = head_request
        conn.keep_alive = True
        conn.until_close = False
        conn.chunk_left = -1
        response = UpstreamResponse(conn)
        conn.response = response
        waiter: asyncio.Future[UpstreamResponse] = loop.create_future()
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
            return await waiter
        except BaseException:
            conn.head_waiter = None
            conn.abort()
            raise


def _is_stream(body: object) -> bool:
    return body is not None and not isinstance(body, bytes | bytearray)
