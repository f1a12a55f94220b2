"""What a dialect hands the pipeline for one request (`pipeline.dialect_handler`).

The pipeline's stages stay as they are: the route decision sees `found` (the model and the body
the dialect wrote) and `path`, admission and the forward carry them like any model request, and
`reply` rewrites the upstream's answer before the relay writes it (streamed as it arrives).
A dialect whose streams can carry loading progress (`sendLoadingState`) puts its framing of it
in the request under `PROGRESS_FRAMES` (`loading.py` writes what it says in them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from ..errors import ProxyError
from ..routing.body import RequestModel
from ..upstream.forward import ReplyRewrite


@dataclass(slots=True)
class Way:
    """`found`: the model named and the body to send (`RequestModel.rewritten` when the dialect
    wrote it); `path` and `query`: the model's own route (`?...` or ""); `reply`: the rewrite of
    the model's answer, None to relay it as it is."""

    found: RequestModel
    path: str
    query: str = ""
    reply: ReplyRewrite | None = None


Reader = Callable[[web.Request], Awaitable[Way]]


class ProgressFrames(Protocol):
    """How loading progress goes in a stream of some API: its `content_type`, a piece of the
    progress text (`text`), and the failure that ends the stream (`failed`)."""

    content_type: str

    def text(self, text: str) -> bytes: ...

    def failed(self, exc: ProxyError) -> bytes: ...


# The request's key for its dialect's `ProgressFrames` (absent: OpenAI's event stream).
PROGRESS_FRAMES = "swapd.progress_frames"
