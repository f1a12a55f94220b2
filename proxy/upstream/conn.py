"""One connection of the lean upstream pool (`pool.py`): an asyncio protocol, and the
llhttp (httptools) callbacks that parse the responses read from it into `UpstreamResponse`s.

A response head is limited to `MAX_HEAD` bytes however it arrives (counted in llhttp's callbacks,
and per read while the head is incomplete). Bytes that answer no request, an upgrade nobody asked
for, or a response llhttp rejects fail the exchange and close the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Protocol

from httptools import HttpParserError, HttpParserUpgrade, HttpResponseParser

from ..floor.errors import HeadTooLarge, OutOfStep, UpstreamError
from .response import UpstreamResponse


class ConnPool(Protocol):
    """What a connection tells its pool (`pool.UpstreamPool`)."""

    def release(self, conn: UpstreamConn) -> None:
        """A response ended and the connection may be used again."""

    def forget(self, conn: UpstreamConn) -> None:
        """The connection closed: it must not be handed out again."""


# llhttp sets no limit of its own. nginx refuses an upstream head over its proxy_buffer_size (4 or
# 8 KiB by default); four times that leaves room for big cookies and policies.
MAX_HEAD = 32 * 1024


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


class UpstreamConn(asyncio.Protocol):
    """One upstream connection, and the httptools callbacks for the responses read from it."""

    def __init__(self, pool: ConnPool, key: tuple[str, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.fd = -1  # the socket's, for the pool's look before reuse
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
        # The upstream reset the connection (rather than closing it): a socket closed with bytes
        # unread in it is reset (RFC 1122 §4.2.2.13), so a request it was sent was not all read.
        self.reset = False
        # In the pool since (loop time), and how long it may stay there (timeouts.idleConn).
        self.idle_since = 0.0
        self.idle_limit = 0.0

    # --- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self.fd = sock.fileno()
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
        self.reset = isinstance(exc, ConnectionResetError | BrokenPipeError)
        self.pool.forget(self)
        self.resume_writing()
        error = exc or ConnectionResetError("upstream closed the connection")
        if self.head_waiter is not None and not self.head_waiter.done():
            self.head_waiter.set_exception(head_error(error))
        response = self.response
        if response is not None and not response.done:
            # httptools has no end-of-input call: a body without Content-Length or chunked
            # framing ends here by definition; any other ends too early.
            response.finish(None if self.until_close else error)

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
            self._fail(cause if isinstance(cause, OutOfStep | HeadTooLarge) else exc)
            return
        if self.head_waiter is not None:
            self.head_read += len(data)
        if self.head_waiter is not None and self.head_read > MAX_HEAD:
            # A head still incomplete after more than the limit (llhttp reports a header only
            # once it is whole; complete ones are counted in the callbacks, whatever the reads).
            self._fail(HeadTooLarge(MAX_HEAD))

    # --- httptools callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.response is None or self.response.done:
            raise OutOfStep("upstream sent bytes that answer no request")
        self.in_head = True
        self.reason = b""
        self.raw_headers = []

    def _count_head(self, size: int) -> None:
        self.head_size += size
        if self.head_size > MAX_HEAD:
            raise HeadTooLarge(MAX_HEAD)

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
            raise OutOfStep("upstream sent a body that answers no request")
        response.feed(body)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
        elif self.response is not None:
            self._complete()

    # --- outcome --------------------------------------------------------------------------------
    def _complete(self) -> None:
        response, self.response = self.response, None
        if response is not None:
            response.finish()
        if self.keep_alive and not self.closed:
            self.resume()
            self.pool.release(self)
        else:
            self.abort()

    def _fail(self, error: Exception) -> None:
        waiter, self.head_waiter = self.head_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(head_error(error))
        response = self.response
        if response is not None and not response.done:
            response.finish(error)
        self.abort()

    def begin(self, head_request: bool) -> UpstreamResponse:
        """Make ready for the response to a request about to be written on this connection."""
        if self.parser_spent:
            self.parser = HttpResponseParser(self)
            self.parser_spent = False
        self.received_any = False
        self.head_request = head_request
        self.head_size = 0
        self.head_read = 0
        self.interim = False
        self.until_close = False
        response = UpstreamResponse(self, self.reused)
        self.reused = True
        self.response = response
        return response

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
        self.pool.forget(self)

    async def drain(self) -> None:
        if self.write_paused is not None:
            await self.write_paused
        if self.closed:
            raise UpstreamError("upstream closed the connection while the body was sent")
