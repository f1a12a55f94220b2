"""The models' log files as the proxy reads them: where one is, its last part (the history), its
lines prefixed with the model's id (the `upstream` and combined views), and following one as it
grows (`follow`, `pipe_model`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

from ...ipc.watcher_names import model_log_name
from .log_hub import HISTORY_BYTES, offer

FOLLOW_POLL_S = 0.2


def model_log_path(log_dir: str, model_id: str) -> Path:
    return Path(log_dir) / model_log_name(model_id)


def tail_of(path: Path, size: int = HISTORY_BYTES) -> tuple[bytes, int]:
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


def prefixed(model_id: str, data: bytes, pending: bytearray) -> bytes:
    """Complete lines of `data` (after what `pending` held), each prefixed with the model id."""
    pending += data
    lines, newline, rest = bytes(pending).rpartition(b"\n")
    pending[:] = rest
    if not newline:
        return b""
    prefix = f"[{model_id}] ".encode()
    return b"".join(prefix + line + b"\n" for line in lines.split(b"\n"))


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
