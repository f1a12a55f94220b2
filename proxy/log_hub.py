"""The proxy's own log: a `logging.Handler` keeping a ring of recent text and feeding live
subscribers (`/logs/stream/proxy`). A slow subscriber loses chunks, never the writer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

HISTORY_BYTES = 100 * 1024
QUEUE_CHUNKS = 1024


class LogHub(logging.Handler):
    """The proxy's own log: a ring of recent text plus live subscribers."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.setFormatter(
            logging.Formatter("[%(asctime)s] [%(levelname)s] %(message)s", "%Y-%m-%d %H:%M:%S")
        )
        self._ring = bytearray()
        self._subscribers: set[asyncio.Queue[bytes]] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode()
        except Exception:
            return
        self.feed(line)

    def feed(self, line: bytes) -> None:
        """Text already formatted (the access log's batches)."""
        self._ring += line
        if len(self._ring) > HISTORY_BYTES:
            del self._ring[: len(self._ring) - HISTORY_BYTES]
        for queue in self._subscribers:
            offer(queue, line)

    def history(self) -> bytes:
        return bytes(self._ring)

    @contextlib.contextmanager
    def subscribe(self, queue: asyncio.Queue[bytes]) -> Iterator[None]:
        self._subscribers.add(queue)
        try:
            yield
        finally:
            self._subscribers.discard(queue)


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
