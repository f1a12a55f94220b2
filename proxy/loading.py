"""Loading progress (`sendLoadingState`, the model's or the top level's): a streaming
`POST /v1/chat/completions` whose model is not ready is answered at once with 200 and an SSE
stream of llama-swap-style `reasoning_content` deltas saying what it waits for (other models
finishing their requests and stopping or going to sleep, the start or the wake of an asleep
model, the health check) with the seconds elapsed,
then `Done! (X.XXs)`, and then the model's own stream in the same response. The upstream's status
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

from ..ipc.model_status import Waiting
from ..ipc.states import DOZING_STATES, HEALTH_CHECK_REASON, LEAVING_STATES, ModelState
from .context import ProxyContext
from .floor.errors import ProxyError, error_body
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
    if not request.path.startswith("/v1/chat/completions"):
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
    if not waiting.holding:
        return f"waiting: {waiting.reason}"
    held = ", ".join(waiting.holding)
    work = "its work" if len(waiting.holding) == 1 else "their work"
    text = f"waiting for {held} to finish {work} (busyCheck: busy)"
    if waiting.until:
        text += f"; at most until {time.strftime('%H:%M:%S', time.localtime(waiting.until))}"
    return text


class Progress:
    def __init__(self, request: web.BaseRequest, ctx: ProxyContext, rt: ModelRuntime, name: str):
        self.request = request
        self.ctx = ctx
        self.rt = rt
        self.name = name  # as the client asked (the chunks' `model`)
        self.response: web.StreamResponse | None = None
        self._began = 0.0
        self._phase = ""
        self._news: list[str] = []  # phases seen since the last write, with their times
        self._wake = asyncio.Event()

    def _chunk(self, text: str) -> bytes:
        delta = {
            "id": "swapd-loading",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.name,
            "choices": [{"index": 0, "delta": {"reasoning_content": text}, "finish_reason": None}],
        }
        return b"data: " + _encode(delta) + b"\n\n"

    async def _say(self, text: str) -> None:
        assert self.response is not None
        await self.response.write(self._chunk(text))

    def _applied(self, applied: Applied[ModelRuntime]) -> None:
        """A listener of the mirror's changes: a model's status changed."""
        if applied.models:
            self._changed()

    def _changed(self) -> None:
        """Note the phase now (several may pass between two writes)."""
        phase = self.phase()
        if phase != self._phase:
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
                        "Content-Type": "text/event-stream",
                        "Cache-Control": "no-cache",
                        "X-Accel-Buffering": "no",
                    }
                )
                await self.response.prepare(self.request)
                await self._say(BAR)
                verb = "waking" if self.rt.state in DOZING_STATES else "loading"
                await self._say(f"swapd {verb} model: {self.rt.id}\n")
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

    def phase(self) -> str:
        """What the request waits for now, from this process's mirror of the model states."""
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
            if rt.status.reason == HEALTH_CHECK_REASON:
                return f"{rt.id} is running; waiting for its health check"
            return f"starting {rt.id}"
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
        return f"waiting for {rt.id}"

    async def done(self) -> None:
        if self.response is None:
            return
        elapsed = asyncio.get_running_loop().time() - self._began
        for text in ("\n", f"Done! ({elapsed:.2f}s)\n", BAR, " \n"):
            await self._say(text)

    async def failed(self, exc: ProxyError) -> web.StreamResponse:
        """The error, appended to the stream already sent (it cannot be a status any more)."""
        assert self.response is not None
        error = error_body(exc.status, exc.message, exc.code, exc.log_tail)
        try:
            await self._say(f"\nfailed: {exc.message}\n")
            await self.response.write(b"data: " + error + b"\n\n")
            await self.response.write_eof()
        except ConnectionError:
            pass
        return self.response
