"""Reading the `model` of a request, and the documented body filters.

Where the model comes from (llama-swap's rules, with 400 instead of 404 when there is none):
* a JSON body (`Content-Type` contains `json`): its top-level `"model"` string;
* a `multipart/form-data` body: the form field `model`, else `?model=`;
* an `application/x-www-form-urlencoded` body: the field `model`, else `?model=`;
* anything else, and bodiless requests: `?model=`. Such bodies are not read here: they stream
  to the upstream.

A body that must be read to find the model is held in memory, so it is bounded: `MAX_BODY_BYTES`
(64 MiB, or `$SWAPD_PROXY_MAX_BODY_MB` MiB); past it the answer is 413. The proxy's server does not
decompress request bodies: a body with a `Content-Encoding` (gzip, deflate) is decoded here only to
find the model, with the same bound on what decoding produces (a gzip bomb is a 413, a body that is
not what its label says a 400), and goes upstream as the bytes the client sent unless a filter
rewrote it (then as the rewritten plain JSON, without the `Content-Encoding`). Filters
(`useModelName`, `filters.stripParams`, `filters.setParams`, a peer's model rewrite) apply to JSON
bodies; multipart bodies get only the `model` rewrite, done in place so the rest of the form is sent
byte for byte.
"""

from __future__ import annotations

import os
import urllib.parse
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web
from aiohttp.helpers import parse_mimetype
from aiohttp.multipart import parse_content_disposition

from ..floor.errors import BadRequest, ProxyError

MAX_BODY_BYTES = int(float(os.environ.get("SWAPD_PROXY_MAX_BODY_MB", "64")) * 1024 * 1024)

NO_MODEL = (
    'no model id could be identified: send it as the JSON body\'s "model", '
    'the form field "model" or ?model='
)


class _ModelOnly(msgspec.Struct):
    # Decoding into this struct still validates the whole document but builds nothing else.
    model: Any = None


_model_decoder = msgspec.json.Decoder(_ModelOnly)
_json_decoder = msgspec.json.Decoder()
_json_encode = msgspec.json.Encoder().encode


@dataclass(slots=True)
class RequestModel:
    """What `read_model` found. `body` is None when the body was not read (it streams up);
    otherwise it is the decoded body, and `raw` the bytes exactly as the client sent them."""

    name: str
    kind: str  # "json" | "multipart" | "form" | "query"
    body: bytes | None
    boundary: bytes = b""
    model_span: tuple[int, int] | None = None  # multipart: where the model value sits in `body`
    raw: bytes | None = None
    # `body` is not what the client sent but a dialect's translation of it (`proxy/dialects/`):
    # it goes upstream as it is, plain (`raw` stays the client's, for a capture).
    rewritten: bool = False


async def read_body(
    request: web.BaseRequest, limit: int = MAX_BODY_BYTES, *, cached: bool = True
) -> bytes:
    """The body as the client sent it, never more than `limit` bytes read (413 past it).
    `cached`: aiohttp's request keeps it (`request.read()` again gives it); uncached, the body
    lives as long as the caller holds it (a body the caller rewrites and lets go of early)."""
    length = request.content_length
    if length is not None:
        if length > limit:
            raise _too_large(limit)
        if cached:
            return await request.read()  # never more than the Content-Length
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def content_codings(request: web.BaseRequest) -> list[str]:
    """The request's `Content-Encoding` codings, in the order they were applied."""
    headers = request.headers
    if "Content-Encoding" not in headers:
        return []
    values = ",".join(headers.getall("Content-Encoding"))
    return [c for c in (t.strip().lower() for t in values.split(",")) if c and c != "identity"]


def decode_body(raw: bytes, codings: list[str], limit: int = MAX_BODY_BYTES) -> bytes:
    """Undo `codings` (gzip, deflate) with at most `limit` bytes produced by each step."""
    data = raw
    for coding in reversed(codings):
        if coding in ("gzip", "x-gzip"):
            wbits = 16 + zlib.MAX_WBITS
        elif coding == "deflate":
            wbits = zlib.MAX_WBITS  # zlib-wrapped, as RFC 9110 defines it
        else:
            raise ProxyError(
                f"Content-Encoding {coding} is not supported here (gzip and deflate are)",
                status=415,
            )
        inflate = zlib.decompressobj(wbits)
        try:
            out = inflate.decompress(data, limit + 1)
        except zlib.error as exc:
            raise BadRequest(f"the request body is not valid {coding} data") from exc
        if len(out) > limit or inflate.unconsumed_tail:
            raise _too_large(limit)
        if not inflate.eof:
            raise BadRequest(f"the request body is truncated {coding} data")
        data = out
    return data


async def read_decoded(request: web.BaseRequest, *, cached: bool = True) -> tuple[bytes, bytes]:
    """(the decoded body, the body as sent): both bounded by `MAX_BODY_BYTES`."""
    raw = await read_body(request, cached=cached)
    codings = content_codings(request)
    return (decode_body(raw, codings) if codings else raw), raw


def _too_large(limit: int) -> ProxyError:
    return ProxyError(
        f"request body larger than {limit // (1024 * 1024)} MiB; the model must be read from it "
        "(raise SWAPD_PROXY_MAX_BODY_MB, or send ?model= with a non-JSON, non-form body)",
        status=413,
    )


async def read_model(request: web.BaseRequest) -> RequestModel:
    ctype = request.headers.get("Content-Type", "")
    if request.method not in ("GET", "HEAD") and request.body_exists:
        if "json" in ctype:
            # read_decoded's work, written out: the way of nearly every model request.
            raw = await read_body(request)
            codings = content_codings(request)
            found = json_model(decode_body(raw, codings) if codings else raw)
            found.raw = raw
            return found
        if "multipart/form-data" in ctype:
            body, raw = await read_decoded(request)
            boundary = parse_mimetype(ctype).parameters.get("boundary", "")
            if not boundary:
                raise BadRequest("could not parse multipart form: no boundary")
            span = multipart_field(body, boundary.encode("latin-1"), "model")
            if span is not None:
                try:
                    name = body[span[0] : span[1]].decode()
                except UnicodeDecodeError as exc:
                    raise BadRequest("the form field model is not UTF-8") from exc
                return RequestModel(
                    _model_name(name), "multipart", body, boundary.encode(), span, raw
                )
            return RequestModel(
                _query_model(request), "multipart", body, boundary.encode(), raw=raw
            )
        if "application/x-www-form-urlencoded" in ctype:
            body, raw = await read_decoded(request)
            try:
                fields = urllib.parse.parse_qs(body.decode(), strict_parsing=False)
            except UnicodeDecodeError as exc:
                raise BadRequest("could not parse the urlencoded form: not UTF-8") from exc
            values = fields.get("model")
            name = values[0] if values else _query_model(request)
            return RequestModel(_model_name(name), "form", body, raw=raw)
    return RequestModel(_query_model(request), "query", None)


def json_object(data: bytes, *, empty: bool = False) -> dict[str, Any]:
    """A JSON body that must be an object, read the one way every route reads one: 400 when it is
    malformed, nested too deeply for the decoder, or not an object (`empty`: a body of nothing
    but whitespace reads as `{}`)."""
    if empty and not data.strip():
        return {}
    try:
        doc = _json_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"malformed JSON body: {exc}") from exc
    except RecursionError as exc:
        raise too_deep() from exc
    if not isinstance(doc, dict):
        raise BadRequest("the JSON body must be an object")
    return doc


async def read_json(request: web.BaseRequest) -> tuple[dict[str, Any], bytes]:
    """(the request's JSON object, its body as sent): `read_decoded`, then `json_object`; an
    empty body reads as `{}`. The body is not cached in the request: a route that translates it
    lets go of it as soon as it can (an Ollama image request's body is as large as its images)."""
    decoded, raw = await read_decoded(request, cached=False)
    return json_object(decoded, empty=True), raw


def json_model(body: bytes) -> RequestModel:
    """The model of a JSON body (its top-level `"model"` string)."""
    try:
        model = _model_decoder.decode(body).model
    except msgspec.ValidationError as exc:
        raise BadRequest(f"the JSON body must be an object: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise BadRequest(f"malformed JSON body: {exc}") from exc
    except RecursionError as exc:
        raise too_deep() from exc
    return RequestModel(_model_name(model), "json", body)


def too_deep() -> BadRequest:
    return BadRequest("malformed JSON body: nested too deeply")


def _query_model(request: web.BaseRequest) -> str:
    return _model_name(request.query.get("model"))


def _model_name(value: object) -> str:
    if value is None or value == "":
        raise BadRequest(NO_MODEL)
    if not isinstance(value, str):
        raise BadRequest(f'"model" must be a string, got {type(value).__name__}')
    return value


# --------------------------------------------------------------------------------------------------
# multipart


def multipart_field(body: bytes, boundary: bytes, name: str) -> tuple[int, int] | None:
    """The byte span of form field `name`'s value in a multipart body (RFC 7578), or None.

    Raises `BadRequest` for a body that is not a well-formed multipart document.
    """
    delimiter = b"--" + boundary
    pos = body.find(delimiter)
    if pos < 0:
        raise BadRequest("could not parse multipart form: boundary not found")
    found: tuple[int, int] | None = None
    while True:
        pos += len(delimiter)
        if body.startswith(b"--", pos):
            return found  # the closing delimiter
        line_end = body.find(b"\r\n", pos)
        if line_end < 0:
            break
        head_end = body.find(b"\r\n\r\n", line_end)
        if head_end < 0:
            break
        next_delim = body.find(b"\r\n" + delimiter, head_end)
        if next_delim < 0:
            break
        if found is None:
            headers = body[line_end + 2 : head_end].decode("latin-1")
            for header in headers.split("\r\n"):
                key, _, value = header.partition(":")
                if key.strip().lower() == "content-disposition":
                    _, params = parse_content_disposition(value.strip())
                    if params.get("name") == name:
                        found = (head_end + 4, next_delim)
        pos = next_delim + 2
    raise BadRequest("could not parse multipart form: truncated or malformed body")


def replace_span(body: bytes, span: tuple[int, int], value: str) -> bytes:
    return body[: span[0]] + value.encode() + body[span[1] :]


# --------------------------------------------------------------------------------------------------
# JSON filters


def filter_json(
    body: bytes,
    *,
    model: str | None,
    strip: Sequence[str] = (),
    set_params: Mapping[str, Any] | None = None,
    then: Mapping[str, Any] | None = None,
) -> bytes:
    """Rewrite a JSON body: `model` (when not None), then drop `strip`, then set `set_params`,
    then set `then` (setParamsByID's params for the requested name), as llama-swap does.

    Keys may be dotted paths into nested objects (`a.b`), as llama-swap's sjson paths are. `model`
    itself is protected from strip and set.
    """
    doc = json_object(body)
    if model is not None:
        doc["model"] = model
    for key in strip:
        if key != "model":
            _delete_path(doc, key.split("."))
    for params in (set_params or {}, then or {}):
        for key in sorted(params):
            if key != "model":
                _set_path(doc, key.split("."), params[key])
    return _json_encode(doc)


def _delete_path(doc: Any, parts: list[str]) -> None:
    for part in parts[:-1]:
        doc = _child(doc, part)
        if doc is None:
            return
    if isinstance(doc, dict):
        doc.pop(parts[-1], None)
    elif isinstance(doc, list) and parts[-1].isdigit() and int(parts[-1]) < len(doc):
        del doc[int(parts[-1])]


def _set_path(doc: Any, parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        child = _child(doc, part)
        if not isinstance(child, dict | list):
            child = {}
            if isinstance(doc, dict):
                doc[part] = child
            else:
                return
        doc = child
    if isinstance(doc, dict):
        doc[parts[-1]] = value
    elif isinstance(doc, list) and parts[-1].isdigit() and int(parts[-1]) < len(doc):
        doc[int(parts[-1])] = value


def _child(doc: Any, part: str) -> Any:
    if isinstance(doc, dict):
        return doc.get(part)
    if isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
        return doc[int(part)]
    return None
