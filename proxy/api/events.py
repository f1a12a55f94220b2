"""`GET /api/events`: one subscriber of the event hub (`events.py`), streamed as llama-swap's
server-sent events. A new subscriber first gets the log histories, `modelStatus`, `uiConfig`,
`profileChanged` and the in-flight snapshot, then every event as it is offered."""

from __future__ import annotations

import asyncio
import contextlib
from typing import cast

from aiohttp import web

from ...ipc.event_frames import frame
from ..context import CTX, ProxyContext
from ..mirror.state import Routes
from ..mirror.wait import routes_of
from ..observe.combined_log import COMBINED_KEY
from ..observe.events import HUB_KEY, EventHub, LogSink, Subscriber
from ..observe.log_files import model_log_path, pipe_model


async def handle_events(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CTX]
    hub = request.app[HUB_KEY]
    routes = await routes_of(ctx)
    # Counted before the client sees a byte: the daemon hears of it then, and announces every
    # record it stores from that moment on.
    with hub.watched():
        return await _stream(request, ctx, hub, routes)


async def _stream(
    request: web.Request, ctx: ProxyContext, hub: EventHub, routes: Routes
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Content-Type-Options": "nosniff",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    sub = Subscriber()
    # The models' lines in the order they came (llama-swap's one upstream log), not model by model.
    upstream_history = await request.app[COMBINED_KEY].upstream_history()
    sub.offer(frame("logData", {"source": "proxy", "data": ctx.logs.history().decode()}))
    upstream_text = upstream_history.decode("utf-8", "replace")
    sub.offer(frame("logData", {"source": "upstream", "data": upstream_text}))
    sub.offer(frame("modelStatus", hub.model_status()))
    sub.offer(hub.ui_config_frame())
    sub.offer(hub.profile_frame())
    sub.offer(hub.inflight_snapshot())
    upstream = LogSink(sub, "upstream")
    pipes = [
        asyncio.ensure_future(
            pipe_model(
                m.id,
                model_log_path(routes.log_dir, m.id),
                False,
                cast(asyncio.Queue[bytes], upstream),
                True,
            )
        )
        for m in routes.table.models
    ]
    hub.subscribers.add(sub)
    try:
        with ctx.logs.subscribe(cast(asyncio.Queue[bytes], LogSink(sub, "proxy"))):
            while not ctx.closing:
                await sub.wake.wait()
                sub.wake.clear()
                await response.write(b"".join(sub.take()))
    finally:
        hub.subscribers.discard(sub)
        for pipe in pipes:
            pipe.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*pipes, return_exceptions=True)
    return response
