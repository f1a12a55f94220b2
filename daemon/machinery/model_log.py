"""A model's log file (`logs/model-<safe id>.log`, named in `ipc.watcher_names`): rotated between
runs by the daemon, and read back for the tail of one start's output."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from ...ipc.watcher_names import model_log_name

LOG_TAIL_LINES = 20
LOG_MAX_BYTES = 10 * 1024 * 1024
LOG_BACKUPS = 2


def log_path(log_dir: Path, model_id: str) -> Path:
    return log_dir / model_log_name(model_id)


def read_tail(path: Path, offset: int = 0, lines: int = LOG_TAIL_LINES) -> tuple[str, ...]:
    """The last `lines` lines written to `path` since byte `offset` (the start of this run)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = offset if offset <= size else 0
            f.seek(max(start, size - 64 * 1024))
            data = f.read()
    except OSError:
        return ()
    text = data.decode(errors="replace").splitlines()
    return tuple(text[-lines:])


def rotate_log(path: Path, keep: int = LOG_BACKUPS) -> None:
    """Before a start: a log over LOG_MAX_BYTES becomes `.1` (older ones shift, `keep` kept)."""
    try:
        if path.stat().st_size < LOG_MAX_BYTES:
            return
    except FileNotFoundError:
        return
    for index in range(keep - 1, 0, -1):
        older = path.with_name(f"{path.name}.{index}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{index + 1}"))
    path.replace(path.with_name(f"{path.name}.1"))


async def settled_tail(path: Path, offset: int) -> tuple[str, ...]:
    """The tail once circusd, which copies the process's output from its own loop, caught up."""
    last = -1
    for _ in range(20):
        size = _size(path)
        if size == last:
            break
        last = size
        await asyncio.sleep(0.05)
    return read_tail(path, offset)


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1
