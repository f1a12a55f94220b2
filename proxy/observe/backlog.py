"""What one streaming client has not been sent yet (an `/api/events` subscriber, a `/logs/stream`
reader), bounded in bytes, and how model output is cut into pieces of bounded size.

A client that stops reading (a laptop asleep with the UI open) must cost the proxy a fixed amount,
whatever the models write meanwhile: its backlog holds at most `CLIENT_BUFFER_BYTES`, and what
does not fit is lost and counted (the bytes and the items), for the stream to say so before its
next data (`eventsDropped`; a `— N bytes dropped —` line). Items are shared, never copied: one
chunk offered to a thousand clients is one object. The writer never waits for a reader.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable

# Per client. A stalled client holds this much here and about as much in its connection's write
# buffer (the last batch taken, which it is not reading): a few MiB for ten of them.
CLIENT_BUFFER_BYTES = int(os.environ.get("SWAPD_CLIENT_BUFFER_BYTES", "") or 1024 * 1024)
# The most text one `logData` event or one prefixed log line carries.
PIECE_BYTES = 64 * 1024
# What the events may cost the proxy, all subscribers together: bytes a second copied out (an
# event counts once per subscriber it goes to), and as much at once. A UI at a thousand requests a
# second gets some 250 KB a second (activity ids, access lines).
FANOUT_BYTES_S = 8 * 1024 * 1024


class Gap:
    """Where a backlog lost items: how many, and their bytes (one per run of losses)."""

    __slots__ = ("items", "size")

    def __init__(self) -> None:
        self.items = 0
        self.size = 0


class Backlog:
    """A client's unsent items, `limit` bytes at most (an item larger than that still goes to an
    empty backlog: one item is never split here, its maker bounds it). What is lost leaves a
    `Gap` where it was lost, for the stream to say so there."""

    __slots__ = ("count", "items", "limit", "size", "wake")

    def __init__(self, limit: int = CLIENT_BUFFER_BYTES) -> None:
        self.items: deque[bytes | Gap] = deque()
        self.size = 0
        self.count = 0  # what the items stand for (an events batch counts as its events)
        self.limit = limit
        self.wake = asyncio.Event()

    def offer(self, data: bytes, count: int = 1) -> bool:
        """Queue `data` (standing for `count` items); False when it did not fit and was lost."""
        if self.size and self.size + len(data) > self.limit:
            self.lose(len(data), count)
            return False
        self.items.append(data)
        self.size += len(data)
        self.count += count
        self.wake.set()
        return True

    def first(self, data: bytes) -> None:
        """What a new client is sent before anything else (its snapshot, bounded by its maker):
        queued whatever the limit."""
        self.items.append(data)
        self.size += len(data)
        self.count += 1
        self.wake.set()

    def put_nowait(self, data: bytes) -> None:
        """A log ring's subscriber (`log_hub.TextRing`)."""
        self.offer(data)

    def lose(self, size: int, count: int = 1) -> None:
        """`count` items of `size` bytes lost here (no room, or a budget ran out)."""
        items = self.items
        gap = items[-1] if items else None
        if not isinstance(gap, Gap):
            gap = Gap()
            items.append(gap)
        gap.items += count
        gap.size += size
        self.wake.set()

    def take(self) -> list[bytes | Gap]:
        out = list(self.items)
        self.items.clear()
        self.size = self.count = 0
        return out

    async def next_batch(self) -> list[bytes | Gap]:
        """Wait for items (or a loss); then all of them."""
        while not self.items:
            self.wake.clear()
            await self.wake.wait()
        return self.take()


class Budget:
    """A token bucket: `rate` a second, at most `rate` at once."""

    __slots__ = ("at", "clock", "rate", "tokens")

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.tokens = rate
        self.clock = clock
        self.at = clock()

    def take(self, amount: float) -> bool:
        now = self.clock()
        self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if amount > self.tokens:
            return False
        self.tokens -= amount
        return True


class Shared:
    """A reader's backlog behind the budget all readers of the process share (a log stream's
    sink): a chunk past the budget is lost for it, and said so where it was."""

    __slots__ = ("backlog", "budget")

    def __init__(self, backlog: Backlog, budget: Budget) -> None:
        self.backlog = backlog
        self.budget = budget

    def put_nowait(self, data: bytes) -> None:
        if self.budget.take(len(data)):
            self.backlog.offer(data)
        else:
            self.backlog.lose(len(data))


def pieces(data: bytes, limit: int = PIECE_BYTES) -> list[bytes]:
    """`data` in pieces of at most `limit` bytes, each cut after a line end where one is in
    reach, else between two UTF-8 characters (never inside one)."""
    if len(data) <= limit:
        return [data]
    out = []
    start = 0
    end = len(data)
    while end - start > limit:
        cut = data.rfind(b"\n", start, start + limit)
        if cut >= 0:
            cut += 1
        else:
            cut = char_boundary(data, start + limit, start)
        out.append(data[start:cut])
        start = cut
    if start < end:
        out.append(data[start:])
    return out


def char_boundary(data: bytes | bytearray, at: int, floor: int = 0) -> int:
    """The largest index <= `at` (and > `floor`) that does not fall inside a UTF-8 character."""
    cut = at
    # Continuation bytes are 0b10xxxxxx; a character is at most 4 bytes.
    while cut > floor + 1 and at - cut < 3 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return cut if (data[cut] & 0xC0) != 0x80 else at
