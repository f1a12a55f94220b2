"""What the accounting stage (the access line, the activity record) learns about a request on its
way through the pipeline: set by the stages that know it, read once when the response is done.

`Tail` keeps the last bytes of a streamed body as they pass (never the whole stream): the final
SSE chunks are where OpenAI `usage` and llama.cpp `timings` arrive.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from aiohttp import web

ACCOUNT = "swapd.account"
# Enough for the last few SSE events of any OpenAI-compatible server (the usage/timings chunk is
# well under 2 KiB); the bound keeps a long stream's cost per chunk constant.
TAIL_BYTES = 16 * 1024


class Tail:
    __slots__ = ("chunks", "size", "total")

    def __init__(self) -> None:
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self.total = 0  # every byte fed: the streamed body's length

    def feed(self, chunk: bytes) -> None:
        chunks = self.chunks
        chunks.append(chunk)
        self.size += len(chunk)
        self.total += len(chunk)
        while self.size - len(chunks[0]) >= TAIL_BYTES:
            self.size -= len(chunks.popleft())

    def data(self) -> bytes:
        return b"".join(self.chunks)[-TAIL_BYTES:]


@dataclass(slots=True)
class Account:
    """The request's figures beyond its status and size (`pipeline.account(request)`)."""

    model: str = "-"
    waited: float = 0.0  # seconds spent waiting for the daemon (a start, a swap, a drain)
    # For the activity record; `route` empty means not a model request (no record).
    route: str = ""
    asked: str = ""
    started: float = 0.0  # loop time the pipeline began
    ttfb: float = -1.0  # seconds from `started` to the upstream's response head
    content_type: str = ""
    body: bytes | None = None  # a small response body, read whole by the relay
    tail: Tail | None = field(default=None)
    flight: str = ""  # the in-flight id (`activity.Recorder.begin`)


def account(request: web.BaseRequest) -> Account:
    found = request.get(ACCOUNT)
    if found is None:
        found = request[ACCOUNT] = Account()
    return found
