"""Loading progress (`sendLoadingState`, the model's or the top level's): a streaming
`POST /v1/chat/completions` whose model is not ready is answered at once with 200 and an SSE
stream of llama-swap-style `reasoning_content` deltas saying what it waits for (other models
finishing their requests and stopping or going to sleep, the start or the wake of an asleep
model, the health check) with the seconds elapsed (and, once the model has loaded before, about
how long its load takes), then `Done! (X.XXs)`, and then the model's own stream in the same
response. A dialect's stream (Ollama's chat and generate) gets the same text in its own framing
(`floor/progress.ProgressFrames`). The upstream's status
and headers are lost, as in llama-swap (200 was already sent); a failure is appended as an
OpenAI error event. Admission's 429 comes before any of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from ..ipc.causes import WaitCause
from ..ipc.model_status import ModelStatus, Waiting
from ..ipc.states import (
    DOZING_STATES,
    KV_RESTORE_REASON,
    LEAVING_STATES,
    ModelState,
    StartStep,
)
from .context import ProxyContext
from .floor.errors import ProxyError, error_body
from .floor.progress import PROGRESS_FRAMES, ProgressFrames
from .mirror.changes import Applied
from .mirror.state import ModelRuntime
from .routing.body import RequestModel

T = TypeVar("T")
TICK_S = 0.75
BAR = "━━━━━\n"
_encode = msgspec.json.Encoder().encode


class _Stream(msgspec.Struct):
    stream: Any = None


_decode_stream = msgspec.json.Decoder(_Stream).decode


def wanted(request: web.BaseRequest, rt: ModelRuntime, found: RequestModel | None) -> bool:
    if not rt.route.send_loading_state or request.method != "POST":
        return False
    dialect = PROGRESS_FRAMES in request  # another API's stream (Ollama's chat and generate)
    if not dialect and not request.path.startswith("/v1/chat/completions"):
        return False
    if found is None or found.kind != "json" or found.body is None:
        return False
    try:
        return _decode_stream(found.body).stream is True
    except msgspec.DecodeError:
        return False


def waiting_words(waiting: Waiting) -> str:
    """What the daemon says the swap waits for (the target's `waiting`): the busy models that
    hold it and until when at the latest (a clock time: the line is written once, read later),
    else the scheduler's own words (collation, the queue, a stop under way, GPU room)."""
    if waiting.cause is WaitCause.COLLATION and waiting.serving and not waiting.holding:
        text = f"serving {', '.join(waiting.serving)}'s queue first"
        if waiting.until:
            text += f"; at most {max(0.0, waiting.until - time.time()):.1f} s more"
        return f"waiting: {text}"
    if not waiting.holding:
        return f"waiting: {waiting.reason}"
    held = ", ".join(waiting.holding)
    work = "its work" if len(waiting.holding) == 1 else "their work"
    text = f"waiting for {held} to finish {work} (busyCheck: busy)"
    if waiting.until:
        text += f"; at most until {time.strftime('%H:%M:%S', time.localtime(waiting.until))}"
    return text


def estimate_words(status: ModelStatus, waking: bool) -> str:
    """How long the model's own load (or wake) took lately, "" before its first."""
    seconds = status.wake_estimate if waking else status.load_estimate
    if seconds is None:
        return ""
    return f"its last {'wakes' if waking else 'loads'} took about {about(seconds)}\n"


def about(seconds: float) -> str:
    """`about N s`'s N s: whole seconds, tenths below 10."""
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


class OpenAIFrames:
    """The progress as OpenAI's stream events (`reasoning_content` deltas); a failure as an
    OpenAI error event."""

    content_type = "text/event-stream"

    def __init__(self, name: str) -> None:
        self.name = name  # as the client asked (the chunks' `model`)

    def text(self, text: str) -> bytes:
        delta = {
            "id": "swapd-loading",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.name,
            "choices": [{"index": 0, "delta": {"reasoning_content": text}, "finish_reason": None}],
        }
        return b"data: " + _encode(delta) + b"\n\n"

    def failed(self, exc: ProxyError) -> bytes:
        return b"data: " + error_body(exc.status, exc.message, exc.code, exc.log_tail) + b"\n\n"


class Progress:
    def __init__(self, request: web.BaseRequest, ctx: ProxyContext, rt: ModelRuntime, name: str):
        self.request = request
        self.ctx = ctx
        self.rt = rt
        frames: ProgressFrames | None = request.get(PROGRESS_FRAMES)
        self.frames = frames if frames is not None else OpenAIFrames(name)
        self.response: web.StreamResponse | None = None
        self._began = 0.0
        self._phase = ""
        self._news: list[str] = []  # phases seen since the last write, with their times
        self._wake = asyncio.Event()

    async def _say(self, text: str) -> None:
        assert self.response is not None
        await self.response.write(self.frames.text(text))

    def _applied(self, applied: Applied[ModelRuntime]) -> None:
        """A listener of the mirror's changes: a model's status changed."""
        if applied.models:
            self._changed()

    def _changed(self) -> None:
        """Note the phase now (several may pass between two writes); between two phases (None)
        the last one stands."""
        phase = self.phase()
        if phase is not None and phase != self._phase:
            self._phase = phase
            elapsed = asyncio.get_running_loop().time() - self._began
            self._news.append(f"\n[{elapsed:.1f}s] {phase}\n")
            self._wake.set()

    async def wait(self, waiting: Awaitable[T]) -> T:
        """Await `waiting` (the daemon's answer), streaming progress meanwhile."""
        task = asyncio.ensure_future(waiting)
        changes = self.ctx.state.changes
        changes.listen(self._applied)
        try:
            if self.response is None:
                self._began = asyncio.get_running_loop().time()
                self.response = web.StreamResponse(
                    headers={
                        "Content-Type": self.frames.content_type,
                        "Cache-Control": "no-cache",
                        "X-Accel-Buffering": "no",
                    }
                )
                await self.response.prepare(self.request)
                await self._say(BAR)
                waking = self.rt.state in DOZING_STATES
                verb = "waking" if waking else "loading"
                await self._say(f"swapd {verb} model: {self.rt.id}\n")
                said = estimate_words(self.rt.status, waking)
                if said:
                    await self._say(said)
                self._changed()
            while True:
                wake = asyncio.ensure_future(self._wake.wait())
                try:
                    done, _ = await asyncio.wait(
                        {task, wake}, timeout=TICK_S, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    wake.cancel()
                if self._news:
                    news, self._news = "".join(self._news), []
                    self._wake.clear()
                    await self._say(news)
                if task in done:
                    return task.result()
                if not done:
                    await self._say(".")
        finally:
            changes.forget(self._applied)
            task.cancel()

    def phase(self) -> str | None:
        """What the request waits for now, from this process's mirror of the model states; None
        between two phases (stopped before its start, ready before the daemon's answer)."""
        rt = self.rt
        others = [
            r for r in self.ctx.state.runtimes.values() if r is not rt and r.state in LEAVING_STATES
        ]
        if others:
            what = ", ".join(
                f"{r.id} to finish its requests"
                if r.state == ModelState.DRAINING
                else f"{r.id} to go to sleep"
                if r.state == ModelState.SLEEPING
                else f"{r.id} to stop"
                for r in sorted(others, key=lambda r: r.id)
            )
            return f"swapping: waiting for {what}"
        if rt.state == ModelState.STARTING:
            if rt.status.starting is StartStep.HEALTH_CHECK:
                return f"{rt.id} is running; waiting for its health check"
            if rt.status.starting is StartStep.KV_RESTORE:
                return f"{rt.id} is up; {KV_RESTORE_REASON}"
            return f"starting {rt.id}"
        if rt.state == ModelState.WAKING and rt.status.reason == KV_RESTORE_REASON:
            return f"{rt.id} is awake; {KV_RESTORE_REASON}"
        if rt.state == ModelState.WAKING:
            return f"waking {rt.id}: its server takes its GPU memory back (its process kept)"
        if rt.state == ModelState.SLEEPING:
            return f"waiting for {rt.id} to fall asleep before it wakes again"
        if rt.state in LEAVING_STATES:
            return f"waiting for {rt.id} to stop before it starts again"
        if rt.status.waiting is not None:
            return waiting_words(rt.status.waiting)
        if rt.state == ModelState.ASLEEP:
            return f"{rt.id} is asleep; waking it"
        return None

    async def done(self) -> None:
        if self.response is None:
            return
        elapsed = asyncio.get_running_loop().time() - self._began
        for text in ("\n", f"Done! ({elapsed:.2f}s)\n", BAR, " \n"):
            await self._say(text)

    async def failed(self, exc: ProxyError) -> web.StreamResponse:
        """The error, appended to the stream already sent (it cannot be a status any more)."""
        assert self.response is not None
        try:
            await self._say(f"\nfailed: {exc.message}\n")
            await self.response.write(self.frames.failed(exc))
            await self.response.write_eof()
        except ConnectionError:
            pass
        return self.response
