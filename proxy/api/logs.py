"""`/logs` and `/logs/stream[/proxy|/upstream|/<model>]` (`?no-history` skips the history).

* proxy: this proxy process's own log records, kept in a 100 KiB ring and fanned out live. (With
  several proxy processes each answers with its own.)
* a model: its process output, which circus writes to one file per model in the routing table's
  `log_dir` (`<watcher name>.log`, the name `swapd.ipc.watcher_names` gives the id); the history
  is its last 100 KiB, then what it writes (rotation and truncation are noticed).
* upstream: every model's output in the order it came, each line prefixed with `[<model id>] `
  (a line longer than 64 KiB in lines of 64 KiB); the history is the last 100 KiB of it.
* combined (`/logs`, `/logs/stream`): the proxy's lines and every model's (prefixed), in the order
  they arrived (`combined_log.py`: one ring, the models' older lines first).

Every view of the models' output is fed by the process's one follower of their files
(`combined_log.py`), whatever the number of readers. A reader's unsent text is bounded in bytes
(`backlog.Backlog`), and what all readers are sent together in a second (`backlog.Shared`, the
events' budget): a slow reader, or one of too many, loses what does not fit (a `— N bytes
dropped —` line says how much, where it was lost), never slows the proxy or makes it hold more.
"""

from __future__ import annotations

from aiohttp import web

from ..context import CTX
from ..floor.errors import BadRequest
from ..mirror.wait import routes_of
from ..observe.backlog import Backlog, Gap, Shared
from ..observe.combined_log import COMBINED_KEY
from ..observe.log_hub import TextRing


async def handle_logs(request: web.Request) -> web.Response:
    body = request.app[COMBINED_KEY].history()
    return web.Response(body=body, content_type="text/plain")


async def handle_stream(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CTX]
    combined = request.app[COMBINED_KEY]
    which = request.match_info.get("which", "")
    history = "no-history" not in request.query
    routes = await routes_of(ctx)
    source: TextRing | None
    if which == "":
        source = combined
    elif which == "proxy":
        source = ctx.logs
    elif which == "upstream":
        await combined.upstream_history()  # the table's models followed, up to this moment
        source = combined.upstream
    else:
        route = routes.model(which)
        if route is None:
            raise BadRequest("invalid logger. Use 'proxy', 'upstream' or a model's ID")
        source = await combined.model(route.id)

    response = web.StreamResponse(
        headers={
            "Content-Type": "text/plain; charset=utf-8",
            "X-Content-Type-Options": "nosniff",
            "X-Accel-Buffering": "no",
            "Cache-Control": "no-cache",
        }
    )
    await response.prepare(request)
    backlog = Backlog()
    if source is None:  # a model whose log is not followed (no log directory yet)
        source = TextRing(0)
    # From the history to joining the ring nothing awaits: no line is missed or sent twice.
    text = source.history() if history else b""
    if text:
        backlog.first(text)
    with source.subscribe(Shared(backlog, combined.fanout)):
        while True:
            out = [
                f"\n— {item.size} bytes dropped —\n".encode() if isinstance(item, Gap) else item
                for item in await backlog.next_batch()
            ]
            await response.write(b"".join(out))
