"""A model's log file (`logs/model-<safe id>.log`, named in `ipc.watcher_names`): rotated between
runs by the daemon, and read back for the tail of one start's output."""

from __future__ import annotations

import asyncio
import os
import re
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


# Words that mark a line as the reason a server gave up (llama.cpp, vLLM, Python, shells, docker).
_CAUSE = re.compile(
    r"error|fatal|failed|failure|exception|cannot|can't|could not|unable|not found|no such file"
    r"|invalid|unknown|unrecognized|denied|out of memory|panic|abort",
    re.IGNORECASE,
)
# swapd's own marker line at the start of each run's output.
_OWN = "--- swapd "
CAUSE_LIMIT = 300


def cause(tail: tuple[str, ...]) -> str:
    """The line of a failed start's output that most likely names its cause: the last one with an
    error word, else the last non-empty one; "" when the model printed nothing."""
    lines = [line.strip() for line in tail if line.strip() and not line.startswith(_OWN)]
    found = next((line for line in reversed(lines) if _CAUSE.search(line)), None)
    if found is None:
        found = lines[-1] if lines else ""
    return found[:CAUSE_LIMIT] + "..." if len(found) > CAUSE_LIMIT else found


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
