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
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from .combined_log import COMBINED_KEY
from .context import CTX
from .errors import ProxyError
from .log_files import FOLLOW_POLL_S, model_log_path, prefixed, tail_of
from .log_hub import QUEUE_CHUNKS, offer
from .sync_wait import routes_of


def _read_range(path: Path, start: int, end: int) -> bytes:
    with path.open("rb") as f:
        f.seek(start)
        return f.read(end - start)


async def follow(path: Path, history: bool) -> AsyncIterator[bytes]:
    """The file's history (optional), then whatever is appended, until cancelled."""
    data, offset = await asyncio.to_thread(tail_of, path)
    if history and data:
        yield data
    inode = None
    while True:
        await asyncio.sleep(FOLLOW_POLL_S)
        try:
            stat = await asyncio.to_thread(path.stat)
        except FileNotFoundError:
            continue
        if (inode is not None and stat.st_ino != inode) or stat.st_size < offset:
            offset = 0  # rotated or truncated: the new file from its start
        inode = stat.st_ino
        if stat.st_size > offset:
            chunk = await asyncio.to_thread(_read_range, path, offset, stat.st_size)
            offset += len(chunk)
            yield chunk


async def pipe_model(
    model_id: str, path: Path, history: bool, queue: asyncio.Queue[bytes], prefix: bool
) -> None:
    pending = bytearray()
    async for chunk in follow(path, history):
        out = prefixed(model_id, chunk, pending) if prefix else chunk
        if out:
            offer(queue, out)


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
            raise ProxyError(400, "invalid logger. Use 'proxy', 'upstream' or a model's ID")
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
