"""`/logs` and `/logs/stream[/proxy|/upstream|/<model>]` (`?no-history` skips the history).

* proxy: this proxy process's own log records, kept in a 100 KiB ring and fanned out live. (With
  several proxy processes each answers with its own.)
* a model: its process output, which circus writes to one file per model in the routing table's
  `log_dir` (`<watcher name>.log`, the name `swapd.ipc.watcher_names` gives the id); the history
  is the file's last 100 KiB, then the file is followed (rotation and truncation are noticed).
* upstream: every model's output, each line prefixed with `[<model id>] `.
* combined (`/logs`, `/logs/stream`): proxy, then upstream.

A slow reader loses lines (a `— N bytes dropped —` marker says how many), never slows the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from ..ipc.watcher_names import model_log_name
from .context import CTX
from .errors import ProxyError
from .log_hub import HISTORY_BYTES, QUEUE_CHUNKS, offer
from .sync_wait import routes_of

FOLLOW_POLL_S = 0.2


def model_log_path(log_dir: str, model_id: str) -> Path:
    return Path(log_dir) / model_log_name(model_id)


def _tail(path: Path, size: int = HISTORY_BYTES) -> tuple[bytes, int]:
    """The last `size` bytes of `path` (from a line start when cut) and the end offset."""
    try:
        with path.open("rb") as f:
            end = f.seek(0, os.SEEK_END)
            start = max(0, end - size)
            f.seek(start)
            data = f.read(end - start)
    except FileNotFoundError:
        return b"", 0
    if start > 0:
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else data
    return data, end


def _read_range(path: Path, start: int, end: int) -> bytes:
    with path.open("rb") as f:
        f.seek(start)
        return f.read(end - start)


async def follow(path: Path, history: bool) -> AsyncIterator[bytes]:
    """The file's history (optional), then whatever is appended, until cancelled."""
    data, offset = await asyncio.to_thread(_tail, path)
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


def _prefixed(model_id: str, data: bytes, pending: bytearray) -> bytes:
    """Complete lines of `data` (after what `pending` held), each prefixed with the model id."""
    pending += data
    lines, newline, rest = bytes(pending).rpartition(b"\n")
    pending[:] = rest
    if not newline:
        return b""
    prefix = f"[{model_id}] ".encode()
    return b"".join(prefix + line + b"\n" for line in lines.split(b"\n"))


async def _pipe_model(
    model_id: str, path: Path, history: bool, queue: asyncio.Queue[bytes], prefix: bool
) -> None:
    pending = bytearray()
    async for chunk in follow(path, history):
        out = _prefixed(model_id, chunk, pending) if prefix else chunk
        if out:
            offer(queue, out)


async def _history(request: web.Request, which: str) -> bytes:
    ctx = request.app[CTX]
    parts: list[bytes] = []
    if which in ("", "proxy"):
        parts.append(ctx.logs.history())
    if which in ("", "upstream"):
        routes = await routes_of(ctx)
        for route in routes.table.models:
            data, _ = await asyncio.to_thread(_tail, model_log_path(routes.log_dir, route.id))
            if data:
                parts.append(_prefixed(route.id, data + b"\n", bytearray()))
    return b"".join(parts)


async def handle_logs(request: web.Request) -> web.Response:
    return web.Response(body=await _history(request, ""), content_type="text/plain")


async def handle_stream(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CTX]
    which = request.match_info.get("which", "")
    history = "no-history" not in request.query
    routes = await routes_of(ctx)
    models: list[tuple[str, bool]] = []  # (model id, prefix lines)
    if which in ("", "upstream"):
        models = [(m.id, True) for m in routes.table.models]
    elif which != "proxy":
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
        if which in ("", "proxy"):
            stack.enter_context(ctx.logs.subscribe(queue))
            if history:
                await response.write(ctx.logs.history())
        pipes = [
            asyncio.ensure_future(
                _pipe_model(mid, model_log_path(routes.log_dir, mid), history, queue, prefix)
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
