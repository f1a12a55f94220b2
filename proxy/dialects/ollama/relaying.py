"""The model's answer rewritten into Ollama's, as the `Reply` the pipeline's relay carries
(`upstream/forward.ReplyRewrite`): a streamed answer line by line as its bytes arrive
(`Streamed`), a whole one in one piece (`Whole`), an error as Ollama's `{"error": ...}` with
the upstream's status. Once the model has answered, the request's `keep_alive` goes to the
daemon (`KeepAlives`)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from ....ipc.messages import KeepAlive
from ...context import ProxyContext
from ...floor.account import Account
from ...floor.errors import BadGateway, UpstreamBroken
from ...routing.body import MAX_BODY_BYTES
from ...upstream.forward import ReplyRewrite
from ...upstream.relay import broke_off
from ...upstream.transport import Reply
from . import replies
from .requests import Translated
from .streams import StreamTranslator

NDJSON = "application/x-ndjson"
JSON = "application/json; charset=utf-8"
_decode = msgspec.json.Decoder().decode
log = logging.getLogger(__name__)


class Whole:
    """An answer made whole here: its bytes, with their length."""

    def __init__(
        self, status: int, reason: str, body: bytes, content_type: str, kept: list[tuple[str, str]]
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = [("Content-Type", content_type), *kept]
        self.content_length: int | None = len(body)
        self._body = body

    async def read(self) -> bytes:
        return self._body

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        yield self._body

    def close(self) -> None:
        pass


class Streamed:
    """The upstream's event stream, each piece rewritten into NDJSON lines as it arrives."""

    def __init__(
        self, inner: Reply, translate: StreamTranslator, acc: Account, kept: list[tuple[str, str]]
    ) -> None:
        self.status = 200
        self.reason = "OK"
        self.headers = [("Content-Type", NDJSON), *kept]
        self.content_length: int | None = None
        self._inner = inner
        self._translate = translate
        self._acc = acc

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_chunks()])

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        translate = self._translate
        try:
            async for chunk in self._inner.iter_chunks():
                lines = translate.feed(chunk)
                if lines:
                    yield lines
        except UpstreamBroken as exc:
            # The 200 is sent: as Ollama, the stream ends with an error line its clients raise
            # (a bare end reads as an empty answer).
            label = self._acc.model
            log.warning("upstream %s broke off a response: %s", label, exc)
            yield translate.fail(f"upstream {label} broke off the response: {exc}")
            return
        finally:
            self._acc.counts = translate.counts()
        last = translate.end()
        if last:
            yield last

    def close(self) -> None:
        self._inner.close()


class KeepAlives:
    """What this process last told the daemon about each model's keep_alive (and for which of its
    processes), so a run of requests with the same value costs one cast, not one each."""

    def __init__(self) -> None:
        self.sent: dict[str, tuple[int | None, float | None]] = {}

    def answered(self, ctx: ProxyContext, model_id: str, translated: Translated) -> None:
        """`model_id` answered a request: its keep_alive (None: the config's `ttl`, as a request
        without one means in Ollama) holds from now on for this run of the model."""
        rt = ctx.state.runtimes.get(model_id)
        if rt is None:
            return  # a peer's model: its own server decides
        seconds = translated.keep_alive if translated.keep_alive_given else None
        pid = rt.status.pid
        if pid is not None and self.sent.get(model_id) == (pid, seconds):
            return
        self.sent[model_id] = (pid, seconds)
        ctx.link.cast_soon(KeepAlive(proxy_id=ctx.link.proxy_id, model=model_id, seconds=seconds))


def rewrite_for(
    ctx: ProxyContext, keeps: KeepAlives, translated: Translated, started: float
) -> ReplyRewrite:
    """The rewrite of the answer to `translated`, for the pipeline's forward stage; `started`:
    when the request arrived, on `time.perf_counter` (the loop's clock may count only
    milliseconds, and Ollama's durations are nanoseconds)."""

    async def rewrite(reply: Reply, acc: Account) -> Reply:
        keeps.answered(ctx, acc.model, translated)
        kept = [(k, v) for k, v in reply.headers if k.lower().startswith("access-control-")]
        clock = replies.Clock(started, acc.waited)
        content_type = next((v for k, v in reply.headers if k.lower() == "content-type"), "")
        if reply.status >= 400:
            body = await _read(reply, acc.model)
            message = replies.error_message(body, reply.status, reply.reason)
            return Whole(reply.status, reply.reason, replies.error_body(message), JSON, kept)
        if "event-stream" in content_type:
            kind = "generate" if translated.kind == "generate" else "chat"
            stream = StreamTranslator(
                kind, translated.completion, translated.asked, clock, time.perf_counter
            )
            return Streamed(reply, stream, acc, kept)
        body = await _read(reply, acc.model)
        clock.ended = time.perf_counter()
        try:
            doc: Any = _decode(body)
        except msgspec.DecodeError as exc:
            raise BadGateway(f"upstream {acc.model} answered with no JSON: {exc}") from exc
        except RecursionError as exc:
            raise BadGateway(f"upstream {acc.model} answered with JSON nested too deeply") from exc
        out = replies.whole(
            translated.kind, translated.completion, translated.asked, doc, clock, translated.single
        )
        if isinstance(doc, dict):
            acc.counts = replies.counts_doc(doc.get("usage"), doc.get("timings"))
        if translated.stream:  # asked for a stream, answered whole: one line of it
            return Whole(200, "OK", replies.encode(out) + b"\n", NDJSON, kept)
        return Whole(200, "OK", replies.encode(out), JSON, kept)

    return rewrite


async def _read(reply: Reply, label: str) -> bytes:
    parts: list[bytes] = []
    size = 0
    try:
        async for chunk in reply.iter_chunks():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise BadGateway(f"upstream {label} answered more than {MAX_BODY_BYTES} bytes")
            parts.append(chunk)
    except UpstreamBroken as exc:
        raise broke_off(label, exc) from exc
    return b"".join(parts)
