"""The models' log files as the proxy reads them: where one is, its last part (the history), and
its lines prefixed with the model's id (the `upstream` and combined views)."""

from __future__ import annotations

import os
from pathlib import Path

from ..ipc.watcher_names import model_log_name
from .log_hub import HISTORY_BYTES

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
