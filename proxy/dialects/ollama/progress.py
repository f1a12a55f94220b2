"""Loading progress (`sendLoadingState`) in Ollama's stream: each piece of the text is a line
whose `message.thinking` (chat) or `thinking` (generate) carries it, as a thinking model's
tokens come (Open WebUI's Ollama connection shows them as the model's thinking); a failure is
Ollama's `{"error": ...}` line, which its clients raise."""

from __future__ import annotations

from typing import Any

import msgspec

from ...floor.errors import ProxyError
from . import values
from .relaying import NDJSON

_encode = msgspec.json.Encoder().encode


class OllamaFrames:
    """`floor.progress.ProgressFrames` for a chat's or a generate's stream; `asked`: the model's
    name as the client wrote it (every line's `model`)."""

    content_type = NDJSON

    def __init__(self, kind: str, asked: str) -> None:
        self.kind = kind
        self.asked = asked

    def text(self, text: str) -> bytes:
        line: dict[str, Any] = {"model": self.asked, "created_at": values.timestamp()}
        if self.kind == "chat":
            line["message"] = {"role": "assistant", "content": "", "thinking": text}
        else:
            line["response"] = ""
            line["thinking"] = text
        line["done"] = False
        return _encode(line) + b"\n"

    def failed(self, exc: ProxyError) -> bytes:
        return _encode({"error": exc.message}) + b"\n"
