"""A model's log file (`logs/model-<safe id>.log`, named in `ipc.watcher_names`): rotated between
runs by the daemon, and read back for the tail of one start's output."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

from ...ipc import exits
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
# Lines that only say that the server gives up, after the line that says why (llama.cpp's
# `main: exiting due to model loading error`, its `cleaning up before exit...`, the xllamacpp
# wrapper's `Failed to init server, please check the input params`).
_GENERIC = re.compile(
    r"exiting due to|cleaning up before exit|shutting down|please check the input params",
    re.IGNORECASE,
)
# What the system said went wrong: the most telling words a line can carry.
_SYSTEM = re.compile(
    r"no such file|permission denied|out of memory|cannot allocate|not enough memory"
    r"|is a directory|address already in use|errno",
    re.IGNORECASE,
)
# A line that names what failed: a quoted name or path.
_NAMED = re.compile(r"'[^']+'|\"[^\"]+\"")
# swapd's own marker line at the start of each run's output.
_OWN = "--- swapd "
CAUSE_LIMIT = 300


def cause(tail: tuple[str, ...], *, fallback: bool = True) -> str:
    """The line of a failed start's output that most likely names its cause; "" when there is
    none (`fallback` False: when no line has an error word).

    The last burst of error lines is where a server says why it gave up, most specific first
    and most generic last (llama.cpp: `failed to open GGUF file '/m.gguf' (No such file or
    directory)`, then `failed to load model '/m.gguf'`, ..., then `exiting due to model loading
    error`). In that burst (the error lines before the last one, up to the first line without an
    error word; lines that only say the server exits do not count), the last line with what the
    system said (`No such file or directory`, `out of memory`, ...) is picked, else the last that
    names something in quotes, else the last error line. With no error line at all, the last
    line (`fallback`)."""
    lines = [line.strip() for line in tail if line.strip() and not line.startswith(_OWN)]
    errors = [
        i for i, line in enumerate(lines) if _CAUSE.search(line) and not _GENERIC.search(line)
    ]
    if not errors:
        found = lines[-1] if lines and fallback else ""
    else:
        first = errors[-1]
        while first > 0 and (_CAUSE.search(lines[first - 1]) or _GENERIC.search(lines[first - 1])):
            first -= 1
        burst = [lines[i] for i in errors if i >= first]
        found = next(
            (
                hits[-1]
                for hits in (
                    [line for line in burst if _SYSTEM.search(line)],
                    [line for line in burst if _NAMED.search(line)],
                    burst,
                )
                if hits
            ),
        )
    return found[:CAUSE_LIMIT] + "..." if len(found) > CAUSE_LIMIT else found


def start_failure(model_id: str, code: int | None, tail: tuple[str, ...]) -> str:
    """What a start that ended with the process's exit says: how it ended (its exit code, or the
    signal that killed it) and the line of its output that names the cause. A death by signal
    quotes only a line with an error word (`GGML_ASSERT(...) failed` before an abort): the last
    line of a process killed mid-work is an ordinary one, and the signal is the cause."""
    if exits.signal_of(code) is not None:
        why = cause(tail, fallback=False)
        return f"model {model_id} exited during startup, {exits.said(code)}" + (
            f": {why}" if why else ""
        )
    why = cause(tail)
    return f"model {model_id} exited during startup with {exits.said(code)}" + (
        f": {why}" if why else ""
    )


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
