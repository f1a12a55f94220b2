"""What the accounting stage (the access line, the activity record) learns about a request on its
way through the pipeline: set by the stages that know it, read once when the response is done.

`Tail` keeps the last bytes of a streamed body as they pass (never the whole stream): the final
SSE chunks are where OpenAI `usage` and llama.cpp `timings` arrive. For a capture
(`captureBuffer`) it keeps every chunk relayed while they add up to at most `keep` bytes, and
goes back to the last bytes only once they do not (the capture is then dropped, as llama-swap
drops one larger than its buffer): the client gets each chunk as it comes either way. What the
tees of the responses streaming at once hold is bounded by their process's `TeeBudget`, and a
tee gives its share back when its stream ends, however it ends (`Tail.close`, in the relay).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from aiohttp import web
from multidict import CIMultiDict

ACCOUNT = "swapd.account"
# Enough for the last few SSE events of any OpenAI-compatible server (the usage/timings chunk is
# well under 2 KiB); the bound keeps a long stream's cost per chunk constant.
TAIL_BYTES = 16 * 1024


class TeeBudget:
    """What one proxy's tees hold at once, across every response streaming now: at most `limit`
    bytes (`captureBuffer`). A tee that would go past it lets go of its capture."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int = 0) -> None:
        self.held = 0
        self.limit = limit


class Tail:
    """`budget`: the process's tee budget, which a capture (`keep` > 0) counts against."""

    __slots__ = ("budget", "chunks", "keep", "size", "teed", "total")

    def __init__(self, keep: int = 0, budget: TeeBudget | None = None) -> None:
        if keep > 0 and budget is None:
            raise ValueError("a capturing tail needs the tee budget it counts against")
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self.total = 0  # every byte fed: the streamed body's length
        self.keep = keep  # capturing while total <= keep
        self.budget = budget
        self.teed = 0  # what this tee counts in its budget's `held`

    def feed(self, chunk: bytes) -> None:
        chunks = self.chunks
        chunks.append(chunk)
        self.size += len(chunk)
        self.total += len(chunk)
        if self.total <= self.keep:
            budget = self.budget
            assert budget is not None
            self.teed += len(chunk)
            budget.held += len(chunk)
            if budget.held <= budget.limit:
                return
            self.release()  # the process's tees are full: this capture goes
        elif self.teed:
            self.release()  # it outgrew its own bound
        while self.size - len(chunks[0]) >= TAIL_BYTES:
            self.size -= len(chunks.popleft())

    def data(self) -> bytes:
        return b"".join(self.chunks)[-TAIL_BYTES:]

    def whole(self) -> bytes | None:
        """Every byte fed, when they fit in `keep`; None otherwise."""
        return b"".join(self.chunks) if self.total <= self.keep else None

    def close(self) -> None:
        """The stream ended, however it ended (a client gone, a cancel, the upstream breaking
        off): what the tee held no longer counts against the budget; a capture it kept stays
        readable (`whole`) for the accounting stage."""
        if self.teed:
            assert self.budget is not None
            self.budget.held -= self.teed
            self.teed = 0

    def release(self) -> None:
        """Stop capturing: what the tee held no longer counts against the budget."""
        self.close()
        self.keep = -1


# An account's `model` until the request names one (the access log's and activity's word).
NO_MODEL = "-"


@dataclass(slots=True)
class Account:
    """The request's figures beyond its status and size (`pipeline.account(request)`)."""

    model: str = NO_MODEL
    waited: float = 0.0  # seconds spent waiting for the daemon (a start, a swap, a drain)
    # For the activity record; `route` empty means not a model request (no record).
    route: str = ""
    asked: str = ""
    started: float = 0.0  # loop time the pipeline began
    ttfb: float = -1.0  # seconds from `started` to the upstream's response head
    content_type: str = ""
    body: bytes | None = None  # a small response body, read whole by the relay
    tail: Tail | None = field(default=None)
    flight: int = 0  # the in-flight number in this process (`activity.Recorder.begin`)
    keep: int = 0  # the capture bound in bytes (`captureBuffer`); 0: no capture
    req_body: bytes | None = None  # the request body as the client sent it, for a capture
    # The upstream's token counts as one JSON document (`usage`, `timings`), where the body the
    # relay carried is not the upstream's own (a dialect rewrote it): what the accounting reads
    # the counts from instead.
    counts: bytes | None = None
    # In llama-swap's views (its in-flight table; its activity log when a POST): a model route,
    # or `/upstream/` to a model route's path. None until the route decision knows.
    listed: bool | None = None
    resp_headers: CIMultiDict[str] | None = None  # the response's, once the relay has them
    # Being forwarded to its model (`upstream/forward.py`): what a drain of it waits for.
    forwarding: bool = False


def account(request: web.BaseRequest) -> Account:
    found = request.get(ACCOUNT)
    if found is None:
        found = request[ACCOUNT] = Account()
    return found
