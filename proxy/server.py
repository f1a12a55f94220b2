"""aiohttp's server, set up for a proxy that faces any client, and the shutdown grace.

* Its request handler is `dispatch.Dispatch`: model requests straight to the pipeline, every
  other request to the `web.Application`.
* Each connection is a `connection.SwapdRequestHandler`: the bounded head time (408) and quiet
  bad requests (400, counted in `stats.bad_requests`); `drain_bound.DrainBound` ends those whose
  clients hold up a drain past `drainClientTimeout`.
* Request bodies are not decompressed (`auto_decompress=False`): they go upstream as sent.
* Request lines and header fields are limited to 8190 bytes each, 128 header lines (aiohttp's
  defaults, nginx's order of size); a whole request head must arrive within `HEAD_TIMEOUT_S`
  of its first byte (`$SWAPD_PROXY_HEAD_TIMEOUT_S`, default 10 s), or the connection gets a 408
  and is closed; an idle kept-alive connection is closed after `KEEPALIVE_S`
  (`$SWAPD_PROXY_KEEPALIVE_S`, default 75 s, nginx's).
* Shutdown (SIGTERM), contract C2: stop accepting; new requests on kept-alive connections get
  503 and `Connection: close` (`front.guard`); requests under way run for up to the grace; then
  every response still streaming is ended as an upstream that broke off would end it (chunked:
  the terminating chunk, after an SSE error event for an event stream; fixed length: the
  connection closed), and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from typing import Any

from aiohttp import web

from .connection import MAX_LINE, SwapdRequestHandler
from .context import ProxyContext
from .dispatch import Dispatch, Stages
from .drain_bound import DrainBound
from .observe.access_log import LOGGER as ACCESS_LOGGER
from .observe.access_log import access_logger

log = logging.getLogger(__name__)

KEEPALIVE_S = float(os.environ.get("SWAPD_PROXY_KEEPALIVE_S", "75"))
GC_YOUNG_THRESHOLD = 20_000
# After the grace, how long ended streams get to write their last bytes before the rest is cut.
_FINAL_FLUSH_S = 2.0

HANDLER_ARGS: dict[str, Any] = {
    "keepalive_timeout": KEEPALIVE_S,
    "access_log": ACCESS_LOGGER,
    "max_line_size": MAX_LINE,
    "max_field_size": MAX_LINE,
    "max_headers": 128,
    "auto_decompress": False,
    "lingering_time": 2.0,
}


async def serve(
    app: web.Application,
    ctx_of: Any,
    create_server: Any,
    stop: asyncio.Event,
    grace: float,
    stages: Stages,
) -> None:
    """Run `app` on the server `create_server(factory)` makes until `stop`, then shut down.
    `stages`: what `Dispatch` runs for the model routes (swapd's own unless a benchmark's)."""
    runner = web.AppRunner(
        app, handle_signals=False, handler_cancellation=True, shutdown_timeout=1.0, **HANDLER_ARGS
    )
    await runner.setup()
    # Everything built so far lives as long as the process: out of the collector's way, so its
    # full collections walk only what requests allocate (a few per cent of CPU per request).
    gc.collect()
    gc.freeze()
    # A request allocates a hundred-odd tracked objects and 32 requests in flight keep a few
    # thousand alive: at the default threshold (700) nearly all of them survive a young
    # collection and are walked again by the older ones. Only cyclic garbage waits for the
    # collector (the rest is freed by reference counting), so a larger young generation costs
    # little memory.
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    manager = runner.server
    assert manager is not None
    ctx: ProxyContext = ctx_of(app)
    # Model requests go straight to the pipeline, the rest to the Application (dispatch.py).
    manager.request_handler = Dispatch(ctx, app, manager.request_handler, stages)
    args = {
        **HANDLER_ARGS,
        "access_log_class": access_logger(ctx.stats, ctx.recorder, ctx.lines),
    }
    loop = asyncio.get_running_loop()
    server = await create_server(
        lambda: SwapdRequestHandler(manager, ctx.stats, loop=loop, state=ctx.state, **args)
    )
    bound = DrainBound(ctx.state, manager, ctx.stats, loop)
    try:
        await stop.wait()
    finally:
        bound.close()
        server.close()
        await _drain(ctx, grace)
        await runner.cleanup()


async def _drain(ctx: ProxyContext, grace: float) -> None:
    ctx.closing = True
    log.info("shutting down: %d request(s) under way, grace %.1f s", ctx.active, grace)
    if ctx.active == 0:
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ctx.idle.wait(), grace)
    if ctx.active > 0:
        log.info("grace over: ending %d response(s) still under way", ctx.active)
        ctx.streams.end()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ctx.idle.wait(), _FINAL_FLUSH_S)
