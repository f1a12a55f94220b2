"""`GET /api/events`: one subscriber of the event hub (`events.py`), streamed as llama-swap's
server-sent events. A new subscriber first gets the log histories (each at most the last
`HISTORY_BYTES` of its log), `modelStatus`, `uiConfig`, `profileChanged` and the in-flight
snapshot, then every event as it is offered. The logs' live events come from the one follower of
the process (`combined_log.py`), encoded once for every subscriber: a subscriber costs its
backlog, nothing per model and nothing while idle."""

from __future__ import annotations

import asyncio

from aiohttp import web

from ...ipc.event_frames import frame
from ..context import CTX, ProxyContext
from ..mirror.wait import routes_of
from ..observe.combined_log import COMBINED_KEY
from ..observe.events import HUB_KEY, EventHub, Subscriber

# The least time between two writes to one subscriber (llama-swap's in-flight pace), and the
# most writes a second to all of them: an event after a quiet spell goes out at once, a burst
# together.
WRITE_EVERY_S = 0.25
WRITES_S = 1000


async def handle_events(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CTX]
    hub = request.app[HUB_KEY]
    await routes_of(ctx)
    # Counted before the client sees a byte: the daemon hears of it then, and announces every
    # record it stores from that moment on.
    with hub.watched():
        return await _stream(request, ctx, hub)


async def _stream(request: web.Request, ctx: ProxyContext, hub: EventHub) -> web.StreamResponse:
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
    # From here to joining the hub nothing awaits: no line is missed or sent twice.
    proxy_text = ctx.logs.history().decode("utf-8", "replace")
    sub.first(frame("logData", {"source": "proxy", "data": proxy_text}))
    upstream_text = upstream_history.decode("utf-8", "replace")
    sub.first(frame("logData", {"source": "upstream", "data": upstream_text}))
    sub.first(frame("modelStatus", hub.model_status()))
    sub.first(hub.ui_config_frame())
    sub.first(hub.profile_frame())
    sub.first(hub.inflight_snapshot())
    hub.subscribers.add(sub)
    try:
        while not ctx.closing:
            await response.write(b"".join(await sub.next_frames(hub)))
            # What comes meanwhile goes out in one write: a busy proxy writes each subscriber
            # a few times a second, not once per batch of events, and all of them together
            # some `WRITES_S` times a second however many there are (with a thousand
            # subscribers, the writes were what cost requests).
            await asyncio.sleep(max(WRITE_EVERY_S, len(hub.subscribers) / WRITES_S))
    finally:
        hub.subscribers.discard(sub)
    return response
