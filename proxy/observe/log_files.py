"""The models' log files as the proxy reads them: where one is, its last part (the history), and
its lines prefixed with the model's id (the `upstream` and combined views). One follower reads
them all (`combined_log.py`), however many clients watch.

A line is cut into lines of at most `backlog.PIECE_BYTES` in the prefixed views (between two
UTF-8 characters): a model that writes 50 MB without a newline costs the proxy one piece at a
time, never the whole line."""

from __future__ import annotations

import os
from pathlib import Path

from ...ipc.watcher_names import model_log_name
from .backlog import PIECE_BYTES, char_boundary
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


def prefixed(model_id: str, data: bytes, pending: bytearray, limit: int = PIECE_BYTES) -> bytes:
    """Complete lines of `data` (after what `pending` held), each prefixed with the model id; a
    line longer than `limit` is cut into lines of at most `limit` bytes, so `pending` never holds
    more than that."""
    pending += data
    lines, newline, rest = bytes(pending).rpartition(b"\n")
    out = [piece for line in lines.split(b"\n") for piece in _cut(line, limit)] if newline else []
    whole = _cut(rest, limit)
    out += whole[:-1]  # pieces of a long line cut already; its last part waits for more
    pending[:] = whole[-1]
    if not out:
        return b""
    prefix = f"[{model_id}] ".encode()
    return b"".join(prefix + piece + b"\n" for piece in out)


def _cut(line: bytes, limit: int) -> list[bytes]:
    """`line` in pieces of at most `limit` bytes, cut between characters (the last may be
    shorter, or empty for an empty line)."""
    if len(line) <= limit:
        return [line]
    out = []
    start = 0
    while len(line) - start > limit:
        cut = char_boundary(line, start + limit, start)
        out.append(line[start:cut])
        start = cut
    out.append(line[start:])
    return out
