"""The relay: one upstream `Reply` written back to the client, whichever transport fetched it.

The rules, in one place:
* hop-by-hop headers and Content-Length are dropped (the response is framed again); every other
  header passes through once, as the upstream sent it;
* codings in the upstream's `Transfer-Encoding` besides `chunked` (`gzip, chunked`) are undone by
  nobody on the way, so they are labelled in `Content-Encoding` for the client;
* a body of known length up to `SMALL_BODY` goes out in one write with its head;
* anything else streams as it arrives, one write per piece received: SSE is never buffered, and
  an SSE response says `X-Accel-Buffering: no` (once: llama-server already sends it);
* an upstream that breaks off before a small body is complete is a 502; one that breaks off a
  streamed body ends it the only ways HTTP allows: a chunked body with its terminating chunk, one
  of fixed length by closing the connection short of it. The shutdown grace ends what still
  streams the same way (`Streams.end`). A server-sent event stream (an OpenAI-style streamed
  answer) that is cut so gets an `error` event before its end, as OpenAI and llama.cpp send an
  error mid-stream (`data: {"error": {...}}`): its last chunk carried no `finish_reason`, so
  without it a client could not tell a cut answer from a whole one; the OpenAI SDKs raise on it.
* an error answer (status 400 or more) that continues a loading stream, whose 200 is already sent
  (the model rejected the request once started: llama-server's `500 tools param requires --jinja
  flag`), goes out as one SSE event, `data: {"error": {...}}`, which the OpenAI SDKs raise as an
  `APIError`, as they raise the same answer's status on a warm model: the model's own error
  object when it sent one with a message, else swapd's naming the model's status and text.
"""

from __future__ import annotations

import logging

import msgspec
from aiohttp import web
from multidict import CIMultiDict

from ..floor.account import Account, Tail, TeeBudget
from ..floor.errors import BadGateway, UpstreamBroken, error_body
from .transport import Reply

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
RESPONSE_DROP = HOP_BY_HOP | {"content-length"}
SMALL_BODY = 256 * 1024


class Streams:
    """The replies one proxy is streaming to its clients now, and the budget their capture tees
    share (`captureBuffer`): in its context (`ctx.streams`)."""

    __slots__ = ("ended", "replies", "tee")

    def __init__(self, tee: TeeBudget) -> None:
        self.replies: set[Reply] = set()
        self.tee = tee
        self.ended = False

    def end(self) -> None:
        """End every streamed response (the shutdown grace is over): each relay sees its
        upstream break off and ends its response cleanly."""
        self.ended = True
        for reply in list(self.replies):
            reply.close()


def broke_off(label: str, exc: BaseException) -> BadGateway:
    return BadGateway(f"upstream {label} failed mid-response: {exc!r}")


def cut_event(last: bytes, ended: bool, label: str, exc: BaseException) -> bytes:
    """The SSE `error` event that ends a cut event stream (`last`: the last bytes sent; an event
    cut off in the middle is closed first, so that the error is an event of its own)."""
    if ended:
        status, code = 503, "shutting_down"
        message = (
            "swapd is shutting down: this response was cut off when its shutdown grace ran out"
        )
    else:
        status, code = 502, "upstream_broke_off"
        message = f"upstream {label} broke off the response: {exc}"
    boundary = last.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")) or not last
    return (b"" if boundary else b"\n\n") + b"data: " + error_body(status, message, code) + b"\n\n"


def response_headers(reply: Reply) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    codings: list[str] = []
    content_type = ""
    for key, value in reply.headers:
        lower = key.lower()
        if lower == "transfer-encoding":
            codings += (
                c for c in (t.strip().lower() for t in value.split(",")) if c not in _FRAMING
            )
        elif lower not in RESPONSE_DROP:
            out.add(key, value)
            if lower == "content-type" and not content_type:
                content_type = value
    if codings:
        labelled = [v for v in out.getall("Content-Encoding", ()) if v.strip()]
        out.popall("Content-Encoding", None)
        out["Content-Encoding"] = ", ".join([*labelled, *codings])
    if content_type.startswith("text/event-stream"):
        out.setdefault("X-Accel-Buffering", "no")
    return out


_FRAMING = frozenset({"chunked", "identity", ""})


async def relay(
    request: web.BaseRequest,
    reply: Reply,
    label: str,
    acc: Account | None,
    streams: Streams,
    *,
    into: web.StreamResponse | None = None,
) -> web.StreamResponse:
    """Write `reply` back to `request`'s client by the rules above; closes nothing itself (the
    caller closes `reply`). `acc`: the request's account, for what the accounting stage reads
    (None: nothing kept). `streams`: the proxy's, which a streamed reply joins while it streams.
    `into`: a response whose head is already sent (a loading stream): the reply's body
    continues it, its status and headers are lost."""
    status = reply.status
    headers = response_headers(reply)
    length = reply.content_length
    bodiless = request.method == "HEAD" or status in (204, 304)
    if acc is not None:
        acc.content_type = headers.get("Content-Type", "")
        acc.resp_headers = headers
    if into is not None:
        if status >= 400 and not bodiless:
            return await _error_into(reply, label, into, acc)
        return await _stream(request, reply, label, into, None, bodiless, acc, streams)
    if length is not None and length <= SMALL_BODY and not bodiless:
        try:
            data = await reply.read()
        except UpstreamBroken as exc:
            raise broke_off(label, exc) from exc
        if acc is not None:
            acc.body = data  # for the token counts, parsed once the response is done
        return web.Response(status=status, reason=reply.reason, headers=headers, body=data)

    response = web.StreamResponse(status=status, reason=reply.reason, headers=headers)
    if length is not None:
        response.content_length = length
    await response.prepare(request)
    return await _stream(request, reply, label, response, length, bodiless, acc, streams)


async def _stream(
    request: web.BaseRequest,
    reply: Reply,
    label: str,
    response: web.StreamResponse,
    length: int | None,
    bodiless: bool,
    acc: Account | None,
    streams: Streams,
) -> web.StreamResponse:
    if bodiless:
        await response.write_eof()
        return response
    streams.replies.add(reply)
    tail = None
    if acc is not None:
        tail = acc.tail = Tail(acc.keep, streams.tee)
    chunk = b""
    try:
        async for chunk in reply.iter_chunks():
            if tail is not None:
                tail.feed(chunk)
            await response.write(chunk)
    except UpstreamBroken as exc:
        if streams.ended:
            log.info("shutting down: ended a response from %s", label)
        else:
            log.warning("upstream %s broke off a response: %s", label, exc)
        if length is None:
            if response.headers.get("Content-Type", "").startswith("text/event-stream"):
                await response.write(cut_event(chunk, streams.ended, label, exc))
            await response.write_eof()  # a chunked body ends cleanly
        elif request.transport is not None:
            request.transport.close()
        return response
    finally:
        streams.replies.discard(reply)
        if tail is not None:
            tail.close()  # the tee's share, given back however the stream ended
    await response.write_eof()
    return response


async def _error_into(
    reply: Reply, label: str, into: web.StreamResponse, acc: Account | None
) -> web.StreamResponse:
    """An error answer, continuing a stream whose 200 is sent: one SSE error event
    (`error_event`) in an event stream, or the (rewritten) body as one line in a dialect's
    line stream, then the end. At most `SMALL_BODY` bytes of it are read."""
    data = b""
    try:
        async for chunk in reply.iter_chunks():
            data += chunk
            if len(data) >= SMALL_BODY:
                break
    except UpstreamBroken as exc:
        log.warning("upstream %s broke off an error answer: %s", label, exc)
    if acc is not None:
        acc.body = data
    if into.content_type == "text/event-stream":
        await into.write(error_event(reply.status, reply.reason, data[:SMALL_BODY], label))
    else:
        # A dialect's own stream (Ollama's NDJSON): its rewrite already said the error in that
        # dialect's shape, one line of it.
        await into.write(data[:SMALL_BODY].rstrip(b"\n") + b"\n")
    await into.write_eof()
    return into


def error_event(status: int, reason: str, data: bytes, label: str) -> bytes:
    """The SSE event for an error answer (`status`, `reason`, its body `data`) inside an event
    stream: the OpenAI SDKs raise `APIError` for a `data:` event whose JSON has an `error`, with
    that object's `message`. The model's own error object goes out as it is (on one line) when it
    has a message; anything else is said in swapd's error shape with the model's status."""
    try:
        doc = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        doc = None
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"]:
        payload = msgspec.json.encode(doc)
    else:
        text = error if isinstance(error, str) else data.decode("utf-8", "replace").strip()
        message = f"upstream {label} answered {status} {reason}".rstrip()
        payload = error_body(status, f"{message}: {text[:500]}" if text else message)
    return b"data: " + payload + b"\n\n"
