"""How a dialect's streams carry loading progress (`sendLoadingState`): a dialect whose streams
can carry it puts its framing (`ProgressFrames`) in the request under `PROGRESS_FRAMES`, and
`loading.py` writes what it says in them. It stands on the floor because both sides need it and
neither may import the other: `loading.py` is on the request path, the dialects above it."""

from __future__ import annotations

from typing import Protocol

from .errors import ProxyError


class ProgressFrames(Protocol):
    """How loading progress goes in a stream of some API: its `content_type`, a piece of the
    progress text (`text`), and the failure that ends the stream (`failed`)."""

    content_type: str

    def text(self, text: str) -> bytes: ...

    def failed(self, exc: ProxyError) -> bytes: ...


# The request's key for its dialect's `ProgressFrames` (absent: OpenAI's event stream).
PROGRESS_FRAMES = "swapd.progress_frames"
