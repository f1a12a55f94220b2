"""A model's streamed answer (OpenAI's server-sent events) as Ollama streams it: one JSON object
per line (NDJSON), translated piece by piece as the upstream's bytes arrive, never held whole.

Each `data:` event with text (`content`, `reasoning_content` as `thinking`, a text completion's
`text`) becomes one line; tool calls, which OpenAI streams in fragments, are gathered and sent
whole in one line once the model finished them (Ollama sends each call complete); the last line
(`done: true`) comes at `[DONE]` or the end of the stream, with `done_reason` and the counts and
durations (`replies.stats`) from the usage and timings events. An error event becomes Ollama's
`{"error": ...}` line, and so does a stream the model broke off (`fail`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from . import replies, values

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_DONE = b"[DONE]"


class StreamTranslator:
    """Feed it the upstream's bytes as they come (`feed`), then `end`; each returns the NDJSON
    lines completed so far (b"" when none). `kind`: chat or generate; `completion`: the stream is
    a text completion's (`choices[].text`)."""

    def __init__(
        self,
        kind: str,
        completion: bool,
        asked: str,
        clock: replies.Clock,
        now: Callable[[], float],
    ) -> None:
        self.kind = kind
        self.completion = completion
        self.asked = asked
        self.clock = clock
        self.now = now
        self.usage: object = None
        self.timings: object = None
        self.finish: object = None
        self.finished = False
        self._partial = b""
        self._calls: dict[int, dict[str, Any]] = {}

    def feed(self, data: bytes) -> bytes:
        if self.finished:
            return b""
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        out = [self._line(line) for line in lines]
        return b"".join(o for o in out if o)

    def end(self) -> bytes:
        """The stream ended: whatever was left, and the last line if `[DONE]` did not come."""
        out = self.feed(b"\n") if self._partial else b""
        return out + (self._done() if not self.finished else b"")

    def fail(self, message: str) -> bytes:
        """The stream broke off: Ollama's `{"error": ...}` line ends it (no `done` line)."""
        self.finished = True
        return _encode({"error": message}) + b"\n"

    def counts(self) -> bytes | None:
        return replies.counts_doc(self.usage, self.timings)

    # ----------------------------------------------------------------------------------------
    def _line(self, line: bytes) -> bytes:
        line = line.strip()
        if not line.startswith(b"data:") or self.finished:
            return b""  # event:, id:, comments, the blank line between events
        payload = line[5:].strip()
        if payload == _DONE:
            return self._done()
        try:
            event = _decode(payload)
        except (msgspec.DecodeError, RecursionError):
            return b""
        if not isinstance(event, dict):
            return b""
        if "error" in event:
            self.finished = True
            message = replies.error_message(payload, 500, "")
            return _encode({"error": message}) + b"\n"
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if isinstance(event.get("timings"), dict):
            self.timings = event["timings"]
        choices = event.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            return b""
        if choice.get("finish_reason") is not None:
            self.finish = choice["finish_reason"]
        if self.completion:
            text, thinking = choice.get("text") or "", ""
        else:
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            text = delta.get("content") or ""
            thinking = delta.get("reasoning_content") or delta.get("reasoning") or ""
            self._gather(delta.get("tool_calls"))
        probs = replies.logprobs(choice.get("logprobs"))
        if not text and not thinking and not probs:
            return b""
        if self.clock.first is None:
            self.clock.first = self.now()
        return self._piece(text, thinking, probs=probs)

    def _gather(self, calls: object) -> None:
        if not isinstance(calls, list):
            return
        for position, call in enumerate(calls):
            if not isinstance(call, dict):
                continue
            index = call.get("index", position)
            index = index if isinstance(index, int) else position
            held = self._calls.setdefault(index, {"name": "", "arguments": ""})
            if isinstance(call.get("id"), str):
                held["id"] = call["id"]
            function = call.get("function")
            if isinstance(function, dict):
                if isinstance(function.get("name"), str):
                    held["name"] += function["name"]
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    held["arguments"] += arguments
                elif isinstance(arguments, dict):
                    held["arguments"] = _encode(arguments).decode()

    def _piece(
        self,
        text: str,
        thinking: str,
        calls: list[dict[str, Any]] | None = None,
        probs: list[dict[str, Any]] | None = None,
    ) -> bytes:
        out: dict[str, Any] = {"model": self.asked, "created_at": values.timestamp()}
        if self.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            out["message"] = message
        else:
            out["response"] = text
            if thinking:
                out["thinking"] = thinking
        if probs:
            out["logprobs"] = probs
        out["done"] = False
        return _encode(out) + b"\n"

    def _done(self) -> bytes:
        self.finished = True
        self.clock.ended = self.now()
        lines = b""
        if self._calls:
            calls = replies.tool_calls(
                [
                    {
                        **({"id": held["id"]} if "id" in held else {}),
                        "function": {"name": held["name"], "arguments": held["arguments"]},
                    }
                    for _, held in sorted(self._calls.items())
                ]
            )
            lines = self._piece("", "", calls)
        final = replies.empty_answer(self.kind, self.asked, replies.done_reason(self.finish))
        final.update(replies.stats(self.usage, self.timings, self.clock))
        return lines + _encode(final) + b"\n"
