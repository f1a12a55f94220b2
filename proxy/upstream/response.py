"""One response from the lean upstream client (`pool.py`): its head, and its body
handed over as it arrives, with read flow control (past `_HIGH_WATER` undelivered bytes the
connection stops being read, until the relay takes them) so a slow client slows the upstream
instead of filling memory."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol

from ..floor.errors import UpstreamBroken

_HIGH_WATER = 1024 * 1024  # pause reading the upstream past this much undelivered body


class _Connection(Protocol):
    received_any: bool

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def abort(self) -> None: ...


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
        "reused",
        "status",
    )

    def __init__(self, conn: _Connection, reused: bool) -> None:
        self._conn = conn
        # Sent on a kept-alive connection: one that fails before any byte of the response is the
        # keep-alive race, worth one retry on a fresh connection.
        self.reused = reused
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
    def feed(self, data: bytes) -> None:
        self._parts.append(data)
        self._size += len(data)
        if self._size > _HIGH_WATER:
            self._conn.pause()
        self._wake()

    def finish(self, error: Exception | None = None) -> None:
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
