"""`/logs` and `/logs/stream[/proxy|/upstream|/<model>]` (`?no-history` skips the history).

* proxy: this proxy process's own log records, kept in a 100 KiB ring and fanned out live. (With
  several proxy processes each answers with its own.)
* a model: its process output, which circus writes to one file per model in the routing table's
  `log_dir` (`<watcher name>.log`, the name `swapd.ipc.watcher_names` gives the id); the history
  is the file's last 100 KiB, then the file is followed (rotation and truncation are noticed).
* upstream: every model's output, each line prefixed with `[<model id>] `.
* combined (`/logs`, `/logs/stream`): the proxy's lines and every model's (prefixed), in the order
  they arrived (`combined_log.py`: one ring, the models' older lines first).

A slow reader loses lines (a `— N bytes dropped —` marker says how many), never slows the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from ..context import CTX
from ..errors import BadRequest
from ..mirror.wait import routes_of
from ..observe.combined_log import COMBINED_KEY
from ..observe.log_files import model_log_path, pipe_model
from ..observe.log_hub import QUEUE_CHUNKS


async def handle_logs(request: web.Request) -> web.Response:
    body = request.app[COMBINED_KEY].history()
    return web.Response(body=body, content_type="text/plain")


async def handle_stream(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CTX]
    which = request.match_info.get("which", "")
    history = "no-history" not in request.query
    routes = await routes_of(ctx)
    models: list[tuple[str, bool]] = []  # (model id, prefix lines)
    if which == "upstream":
        models = [(m.id, True) for m in routes.table.models]
    elif which not in ("", "proxy"):
        route = routes.model(which)
        if route is None:
            raise BadRequest("invalid logger. Use 'proxy', 'upstream' or a model's ID")
        models = [(route.id, False)]

    response = web.StreamResponse(
        headers={
            "Content-Type": "text/plain; charset=utf-8",
            "X-Content-Type-Options": "nosniff",
            "X-Accel-Buffering": "no",
            "Cache-Control": "no-cache",
        }
    )
    await response.prepare(request)
    queue: asyncio.Queue[bytes] = asyncio.Queue(QUEUE_CHUNKS)
    with contextlib.ExitStack() as stack:
        # Combined: one ring in the order lines arrived (combined_log.py), history then live.
        source = request.app[COMBINED_KEY] if which == "" else ctx.logs
        if which in ("", "proxy"):
            stack.enter_context(source.subscribe(queue))
            if history:
                await response.write(source.history())
        pipes = [
            asyncio.ensure_future(
                pipe_model(mid, model_log_path(routes.log_dir, mid), history, queue, prefix)
            )
            for mid, prefix in models
        ]
        try:
            while True:
                await response.write(await queue.get())
        finally:
            for pipe in pipes:
                pipe.cancel()
    return response
