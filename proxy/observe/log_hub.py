"""The proxy's own log: a `logging.Handler` keeping a ring of recent text and feeding live
subscribers (`/logs/stream/proxy`). A slow subscriber loses chunks, never the writer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

HISTORY_BYTES = 100 * 1024
QUEUE_CHUNKS = 1024


class TextRing:
    """Recent text (the last `limit` bytes, cut at a line start) and live subscribers, each fed
    every chunk as it comes."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._ring = bytearray()
        self._subscribers: set[asyncio.Queue[bytes]] = set()

    def put(self, data: bytes) -> None:
        self._ring += data
        self.trim()
        for queue in self._subscribers:
            offer(queue, data)

    def trim(self) -> None:
        if len(self._ring) > self._limit:  # the oldest lines go, whole
            cut = self._ring.find(b"\n", len(self._ring) - self._limit)
            del self._ring[: cut + 1 if cut >= 0 else len(self._ring) - self._limit]

    def history(self) -> bytes:
        return bytes(self._ring)

    def seed(self, data: bytes) -> None:
        """Text older than everything the ring holds, put before it (nobody is told)."""
        self._ring[:0] = data
        self.trim()

    @contextlib.contextmanager
    def subscribe(self, queue: asyncio.Queue[bytes]) -> Iterator[None]:
        self._subscribers.add(queue)
        try:
            yield
        finally:
            self._subscribers.discard(queue)


class LogHub(logging.Handler, TextRing):
    """The proxy's own log: a ring of recent text plus live subscribers."""

    def __init__(self) -> None:
        logging.Handler.__init__(self, level=logging.INFO)
        TextRing.__init__(self, HISTORY_BYTES)
        self.setFormatter(
            logging.Formatter("[%(asctime)s] [%(levelname)s] %(message)s", "%Y-%m-%d %H:%M:%S")
        )

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode()
        except Exception:
            return
        self.feed(line)

    def feed(self, line: bytes) -> None:
        """Text already formatted (the access log's batches)."""
        self.put(line)


def offer(queue: asyncio.Queue[bytes], data: bytes) -> None:
    try:
        queue.put_nowait(data)
    except asyncio.QueueFull:
        # Drop the oldest chunk and say so; the writer never waits for a reader.
        with contextlib.suppress(asyncio.QueueEmpty):
            dropped = queue.get_nowait()
            queue.put_nowait(f"\n— {len(dropped)} bytes dropped —\n".encode())
        with contextlib.suppress(asyncio.QueueFull):
            queue.put_nowait(data)
