"""The model's whole answers (`stream: false`, embeddings, errors) in Ollama's shape, and what
every answer ends with: `done_reason` and the counts and durations (pure functions).

Counts come from the upstream's OpenAI `usage`, else llama.cpp's `timings`; durations from
`timings` where the upstream sends them (llama-server does), else from what the proxy measured.
Every duration is an integer of nanoseconds, as in Ollama; a figure nobody knows is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec

from . import values

_decode = msgspec.json.Decoder().decode
_MAX_COUNT = 2**53
_encode = msgspec.json.Encoder().encode
_DONE_REASONS = {"tool_calls": "stop", "function_call": "stop", "eos": "stop"}


@dataclass(slots=True)
class Clock:
    """The request's moments on `time.perf_counter`: `started` (it arrived), `first` (the first
    token came), `ended` (the last did); `waited`: seconds it waited for the daemon (a start or
    a swap: Ollama's `load_duration`)."""

    started: float
    waited: float
    first: float | None = None
    ended: float | None = None


def done_reason(finish: object) -> str:
    """OpenAI's `finish_reason` as Ollama's `done_reason` (`stop`, `length`, ...)."""
    return _DONE_REASONS.get(finish, finish) if isinstance(finish, str) else "stop"


def counts_doc(usage: object, timings: object) -> bytes | None:
    """The upstream's token counts as one document the accounting reads (`Account.counts`)."""
    doc: dict[str, Any] = {}
    if isinstance(usage, dict):
        doc["usage"] = usage
    if isinstance(timings, dict):
        doc["timings"] = timings
    return _encode(doc) if doc else None


def stats(usage: object, timings: object, clock: Clock) -> dict[str, int]:
    out: dict[str, int] = {}
    ended = clock.ended if clock.ended is not None else clock.started
    out["total_duration"] = values.nanoseconds(ended - clock.started)
    out["load_duration"] = values.nanoseconds(clock.waited)
    usage = usage if isinstance(usage, dict) else {}
    timings = timings if isinstance(timings, dict) else {}
    prompt = _int(usage.get("prompt_tokens"))
    if prompt is None:
        prompt_n, cached = _int(timings.get("prompt_n")), _int(timings.get("cache_n"))
        prompt = None if prompt_n is None else prompt_n + (cached or 0)
    if prompt is not None:
        out["prompt_eval_count"] = prompt
    completion = _int(usage.get("completion_tokens"))
    if completion is None:
        completion = _int(timings.get("predicted_n"))
    if completion is not None:
        out["eval_count"] = completion
    prompt_ms, predicted_ms = _num(timings.get("prompt_ms")), _num(timings.get("predicted_ms"))
    sent = clock.started + clock.waited
    if prompt_ms is not None:
        out["prompt_eval_duration"] = values.nanoseconds(prompt_ms / 1000)
    elif clock.first is not None:
        out["prompt_eval_duration"] = values.nanoseconds(clock.first - sent)
    if predicted_ms is not None:
        out["eval_duration"] = values.nanoseconds(predicted_ms / 1000)
    elif clock.first is not None:
        out["eval_duration"] = values.nanoseconds(ended - clock.first)
    elif completion is not None:
        out["eval_duration"] = values.nanoseconds(ended - sent)
    return out


def _int(value: object) -> int | None:
    """A count the model reported: an integer from 0 to 2^53 (the activity log's bound), else
    not reported."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return int(value) if 0 <= value <= _MAX_COUNT else None


def _num(value: object) -> float | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return float(value) if math.isfinite(value) else None


# --------------------------------------------------------------------------------------------------


def error_message(body: bytes, status: int, reason: str) -> str:
    """The message of an upstream's error answer: OpenAI's `error.message`, a plain `error`
    string, `detail` (FastAPI's), else the text itself, bounded."""
    try:
        doc = _decode(body)
    except (msgspec.DecodeError, RecursionError):
        text = body.decode("utf-8", "replace").strip()
        return text[:1000] or f"{status} {reason}".strip()
    if isinstance(doc, dict):
        error = doc.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if isinstance(doc.get("detail"), str):
            return str(doc["detail"])
        if isinstance(doc.get("message"), str):
            return str(doc["message"])
    return body.decode("utf-8", "replace")[:1000]


def error_body(message: str) -> bytes:
    return _encode({"error": message})


def tool_calls(calls: object) -> list[dict[str, Any]]:
    """OpenAI's tool calls (arguments as JSON text) as Ollama's (arguments as an object)."""
    out: list[dict[str, Any]] = []
    if not isinstance(calls, list):
        return out
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        entry: dict[str, Any] = {
            "function": {
                "name": function.get("name") or "",
                "arguments": arguments(function.get("arguments")),
            }
        }
        if isinstance(call.get("id"), str):
            entry["id"] = call["id"]
        entry["function"]["index"] = index
        out.append(entry)
    return out


def arguments(given: object) -> dict[str, Any]:
    if isinstance(given, dict):
        return given
    if isinstance(given, str) and given.strip():
        try:
            parsed = _decode(given)
        except (msgspec.DecodeError, RecursionError):
            return {"arguments": given}  # not JSON (or too deep to read): kept, under a name
        return parsed if isinstance(parsed, dict) else {"value": parsed}
    return {}


def logprobs(given: object) -> list[dict[str, Any]] | None:
    """OpenAI's `choices[].logprobs.content` as Ollama's `logprobs`."""
    content = given.get("content") if isinstance(given, dict) else None
    if not isinstance(content, list):
        return None
    out = []
    for item in content:
        if not isinstance(item, dict):
            continue
        entry: dict[str, Any] = {"token": item.get("token", ""), "logprob": item.get("logprob", 0)}
        top = item.get("top_logprobs")
        if isinstance(top, list):
            entry["top_logprobs"] = [
                {"token": t.get("token", ""), "logprob": t.get("logprob", 0)}
                for t in top
                if isinstance(t, dict)
            ]
        out.append(entry)
    return out


# --------------------------------------------------------------------------------------------------


def whole(
    kind: str, completion: bool, asked: str, doc: object, clock: Clock, single: bool = False
) -> dict[str, Any]:
    """One whole answer of the model's (a chat or text completion, embeddings) in Ollama's
    shape for `kind` (chat, generate, embed, embeddings)."""
    doc = doc if isinstance(doc, dict) else {}
    usage, timings = doc.get("usage"), doc.get("timings")
    if kind in ("embed", "embeddings"):
        data = doc.get("data")
        items = sorted(
            (d for d in data if isinstance(d, dict)) if isinstance(data, list) else (),
            key=lambda d: d.get("index", 0),
        )
        vectors = [d.get("embedding") or [] for d in items]
        if single:
            return {"embedding": vectors[0] if vectors else []}
        out: dict[str, Any] = {"model": asked, "embeddings": vectors}
        figures = stats(usage, timings, clock)
        out["total_duration"] = figures["total_duration"]
        out["load_duration"] = figures["load_duration"]
        if "prompt_eval_count" in figures:
            out["prompt_eval_count"] = figures["prompt_eval_count"]
        return out
    choices = doc.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    choice = choice if isinstance(choice, dict) else {}
    out = {"model": asked, "created_at": values.timestamp()}
    if completion:
        text, thinking, calls = choice.get("text") or "", None, None
    else:
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        text = message.get("content") or ""
        thinking = message.get("reasoning_content") or message.get("reasoning")
        calls = message.get("tool_calls")
    if kind == "chat":
        reply: dict[str, Any] = {"role": "assistant", "content": text}
        if thinking:
            reply["thinking"] = thinking
        if calls:
            reply["tool_calls"] = tool_calls(calls)
        out["message"] = reply
    else:
        out["response"] = text
        if thinking:
            out["thinking"] = thinking
    probs = logprobs(choice.get("logprobs"))
    if probs is not None:
        out["logprobs"] = probs
    out["done"] = True
    out["done_reason"] = done_reason(choice.get("finish_reason"))
    out.update(stats(usage, timings, clock))
    return out


def empty_answer(kind: str, asked: str, reason: str) -> dict[str, Any]:
    """Ollama's answer to a chat or generate with nothing to answer: the model was loaded
    (`load`) or unloaded (`unload`)."""
    out: dict[str, Any] = {"model": asked, "created_at": values.timestamp()}
    if kind == "chat":
        out["message"] = {"role": "assistant", "content": ""}
    elif kind == "generate":
        out["response"] = ""
    else:
        out["embeddings"] = []
        return out
    out["done"] = True
    out["done_reason"] = reason
    return out


def encode(doc: dict[str, Any]) -> bytes:
    return _encode(doc)
