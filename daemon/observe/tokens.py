"""Token counts and speeds from a model's response, the way llama-swap reads them: OpenAI
`usage` (`prompt_tokens`/`completion_tokens`, or `input_tokens`/`output_tokens`; cached from
`cache_read_input_tokens`, `input_tokens_details.cached_tokens` or
`prompt_tokens_details.cached_tokens`), under `usage`, `response.usage` or `message.usage`;
llama.cpp `timings` (`prompt_n`, `predicted_n`, `cache_n`, `prompt_per_second`,
`predicted_per_second`, `draft_n`/`draft_n_accepted`), which override the usage counts. A stream
is read from its tail (`account.Tail`): the `data:` events there, the latest usage and timings
winning. -1 means not reported. Non-2xx bodies give the error message instead.

A count is an integer from 0 to 2^53 (what every JSON reader holds exactly), a speed a finite
number; anything else (`1e300`, -3, a string) reads as not reported, and a document nested too
deeply for the decoder gives no counts: one answer never costs its record, nor its batch.
"""

from __future__ import annotations

import math
import typing
from typing import Annotated, Any, TypeVar

import msgspec

from ...ipc.activity import Tokens

_decode = msgspec.json.Decoder().decode
ERROR_LIMIT = 500
# The struct path's types: counts as JSON integers, speeds as any number. A document with
# another type where a count should be (12.0, a string) fails to decode into `_Doc` and takes the
# general way, which reads what it can. gc=False: they hold scalars and each other only.
MAX_COUNT = 2**53
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)] | None
Speed = float | None


class _Details(msgspec.Struct, gc=False):
    cached_tokens: Count = None


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: Count = None
    completion_tokens: Count = None
    input_tokens: Count = None
    output_tokens: Count = None
    cache_read_input_tokens: Count = None
    input_tokens_details: _Details | None = None
    prompt_tokens_details: _Details | None = None


class _Timings(msgspec.Struct, gc=False):
    prompt_n: Count = None
    predicted_n: Count = None
    cache_n: Count = None
    prompt_per_second: Speed = None
    predicted_per_second: Speed = None
    draft_n: Count = None
    draft_n_accepted: Count = None


class _Outer(msgspec.Struct, gc=False):
    usage: _Usage | None = None


class _Doc(msgspec.Struct, gc=False):
    """The parts of a response that carry counts: decoding into it skips everything else, which
    is several times cheaper than building the whole document."""

    usage: _Usage | None = None
    timings: _Timings | None = None
    response: _Outer | None = None
    message: _Outer | None = None


_decode_doc = msgspec.json.Decoder(_Doc).decode
_S = TypeVar("_S", bound=msgspec.Struct)


def _int(value: Any) -> int | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return int(value) if 0 <= value <= MAX_COUNT else None


def _float(value: Any) -> float | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return _speed(float(value))


def _speed(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _lenient(cls: type[_S], value: Any) -> _S | None:
    """`value`, a decoded JSON object, as `cls`, read the way the struct path cannot: a count
    written as a float is cut to an int, a boolean or a string reads as absent, and an object
    field is read the same way (None where `value` is not an object)."""
    if not isinstance(value, dict):
        return None
    fields: dict[str, Any] = {}
    for field in msgspec.structs.fields(cls):
        got = value.get(field.name)
        if field.type == Count:
            fields[field.name] = _int(got)
        elif field.type == Speed:
            fields[field.name] = _float(got)
        else:  # another of these structs, or None
            fields[field.name] = _lenient(typing.get_args(field.type)[0], got)
    return cls(**fields)


def _from_object(doc: Any, tokens: Tokens) -> None:
    if isinstance(doc, list) and doc:  # /infill: the timings are in the last element
        doc = doc[-1]
    read = _lenient(_Doc, doc)
    if read is not None:
        _read(read, tokens)


def _parse_into(data: bytes, tokens: Tokens) -> None:
    try:
        doc = _decode_doc(data)
    except RecursionError:
        return  # nested too deeply to read (the general way could not either): no counts
    except msgspec.DecodeError:
        # Not the usual shape (an /infill array, a field of another type): the general way.
        try:
            _from_object(_decode(data), tokens)
        except (msgspec.DecodeError, RecursionError):
            pass
        return
    _read(doc, tokens)


def _read(doc: _Doc, tokens: Tokens) -> None:
    """The counts of a response, decoded or read leniently: llama.cpp's `timings` override the
    usage counts."""
    if doc.usage is not None:
        _usage_struct(doc.usage, tokens)
    for outer in (doc.response, doc.message):
        if outer is not None and outer.usage is not None:
            _usage_struct(outer.usage, tokens)
    timings = doc.timings
    if timings is not None:
        if timings.prompt_n is not None:
            tokens.input_tokens = timings.prompt_n
        if timings.predicted_n is not None:
            tokens.output_tokens = timings.predicted_n
        if (speed := _speed(timings.prompt_per_second)) is not None:
            tokens.prompt_per_second = speed
        if (speed := _speed(timings.predicted_per_second)) is not None:
            tokens.tokens_per_second = speed
        if timings.cache_n is not None:
            tokens.cache_tokens = timings.cache_n
        if timings.draft_n is not None and timings.draft_n_accepted is not None:
            tokens.draft_tokens = timings.draft_n
            tokens.draft_acc_tokens = timings.draft_n_accepted


def _usage_struct(usage: _Usage, tokens: Tokens) -> None:
    """OpenAI's names win over the others when a usage has both (llama-swap's order); a later
    usage's zero does not hide an earlier count."""
    value = usage.prompt_tokens if usage.prompt_tokens is not None else usage.input_tokens
    if value is not None and (value > 0 or tokens.input_tokens < 0):
        tokens.input_tokens = value
    value = usage.completion_tokens if usage.completion_tokens is not None else usage.output_tokens
    if value is not None and (value > 0 or tokens.output_tokens < 0):
        tokens.output_tokens = value
    cached = usage.cache_read_input_tokens
    if cached is None and usage.input_tokens_details is not None:
        cached = usage.input_tokens_details.cached_tokens
    if cached is None and usage.prompt_tokens_details is not None:
        cached = usage.prompt_tokens_details.cached_tokens
    if cached is not None:
        tokens.cache_tokens = cached


def from_body(body: bytes) -> Tokens:
    """A whole JSON response body."""
    tokens = Tokens()
    if b'"usage"' in body or b'"timings"' in body:
        _parse_into(body, tokens)
    return tokens


def from_stream_tail(tail: bytes) -> Tokens:
    """The last bytes of an SSE stream: every complete `data:` event in them, oldest first."""
    tokens = Tokens()
    if b'"usage"' not in tail and b'"timings"' not in tail:
        return tokens
    for line in tail.split(b"\n"):
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if not data or data == b"[DONE]" or (b'"usage"' not in data and b'"timings"' not in data):
            continue
        _parse_into(data, tokens)  # the first line of the tail may be cut: then it adds nothing
    return tokens


def error_message(status: int, reason: str, body: bytes | None) -> str:
    """llama-swap's `error_msg` for a non-2xx response: `error.message`, `error`, `message` or
    `detail` from a JSON body (at most 500 characters), else the status and its reason."""
    if body:
        try:
            doc = _decode(body)
        except (msgspec.DecodeError, RecursionError):
            doc = None
        if isinstance(doc, dict):
            error = doc.get("error")
            for value in (
                error.get("message") if isinstance(error, dict) else None,
                error,
                doc.get("message"),
                doc.get("detail"),
            ):
                if isinstance(value, str) and value.strip():
                    text = value.strip()
                    return text[:ERROR_LIMIT] + "..." if len(text) > ERROR_LIMIT else text
    return f"{status} {reason}".strip()
