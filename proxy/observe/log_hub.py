"""The proxy's own log: a `logging.Handler` keeping a ring of recent text and feeding live
subscribers (`/logs/stream/proxy`). A subscriber is a sink that never blocks (a client's
`backlog.Backlog`, bounded in bytes, or the combined log): a slow reader loses chunks, never the
writer."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Protocol

HISTORY_BYTES = 100 * 1024


class Sink(Protocol):
    """Takes a chunk at once, without waiting (what it cannot keep it drops and counts)."""

    def put_nowait(self, data: bytes) -> None: ...


class TextRing:
    """Recent text (the last `limit` bytes, cut at a line start) and live subscribers, each fed
    every chunk as it comes."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._ring = bytearray()
        self._subscribers: set[Sink] = set()

    def put(self, data: bytes) -> None:
        self._ring += data
        self.trim()
        for sink in self._subscribers:
            sink.put_nowait(data)

    def trim(self) -> None:
        ring = self._ring
        if len(ring) > self._limit:  # the oldest lines go, whole
            start = len(ring) - self._limit
            cut = ring.find(b"\n", start) + 1
            if cut <= 0 or cut == len(ring):
                # No line starts in the last `limit` bytes: the last part of the one that
                # ends there, from a character's start.
                cut = start
                while cut < len(ring) and (ring[cut] & 0xC0) == 0x80:
                    cut += 1
            del ring[:cut]

    def history(self) -> bytes:
        return bytes(self._ring)

    def seed(self, data: bytes) -> None:
        """Text older than everything the ring holds, put before it (nobody is told)."""
        self._ring[:0] = data
        self.trim()

    @contextlib.contextmanager
    def subscribe(self, sink: Sink) -> Iterator[None]:
        self._subscribers.add(sink)
        try:
            yield
        finally:
            self._subscribers.discard(sink)


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
