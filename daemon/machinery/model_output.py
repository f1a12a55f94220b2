"""The circus stream a model watcher's stdout and stderr go through (inside circusd).

Always into the model's log file, as circus's own `FileStream` (the proxy's `/logs` read it).
With `echo` (`logToStdout: upstream` or `both`) each line also goes to circusd's stdout as
`[model-id] line`, so under systemd it reaches `journalctl -u swapd`.

circusd reads every watcher's pipes on one loop: a stdout that stops reading (a stalled journald,
a full pipe) must not stop it. Lines for stdout wait in one bounded queue, written by a thread;
when the queue is full the line is dropped (it is still in the file) and a marker says how many
were, as llama-swap drops for a slow log subscriber rather than stall the writer.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any

from circus.stream import FileStream

__all__ = ["ModelOutputStream", "StdoutEcho"]

# Lines waiting for stdout; past this they are dropped (and counted).
QUEUE_LINES = 4096
# A line longer than this is cut: each piece goes out as a line of its own.
MAX_LINE = 16 * 1024


class StdoutEcho:
    """One writer thread to a file descriptor (circusd's stdout), fed through a bounded queue."""

    def __init__(self, fd: int = 1, max_lines: int = QUEUE_LINES) -> None:
        self.fd = fd
        # (lines dropped just before this one, the line)
        self._queue: queue.Queue[tuple[int, bytes]] = queue.Queue(max_lines)
        # Only the caller's thread (circusd's loop) touches these.
        self._gap = 0
        self.dropped = 0
        self._thread: threading.Thread | None = None

    def put(self, line: bytes) -> None:
        """Queue one line (ending in a newline); never blocks."""
        self._ensure_thread()
        try:
            self._queue.put_nowait((self._gap, line))
        except queue.Full:
            self._gap += 1
            self.dropped += 1
        else:
            self._gap = 0

    def _ensure_thread(self) -> None:
        if self._thread is None:
            # A daemon thread: circusd's exit does not wait on a stdout nobody reads.
            self._thread = threading.Thread(target=self._run, name="swapd-model-echo", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            dropped, line = self._queue.get()
            if dropped:
                self._write(f"[swapd] {dropped} model output lines dropped (stdout too slow)\n")
            self._write(line)

    def _write(self, data: bytes | str) -> None:
        view = memoryview(data.encode() if isinstance(data, str) else data)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError:
            pass  # stdout closed or gone: the line is in the model's log file anyway


_echo = StdoutEcho()


class ModelOutputStream(FileStream):
    """circus `stdout_stream`/`stderr_stream` class: `FileStream` plus an optional prefixed echo.

    Options (from the watcher's stream mapping): `filename`, `model` (the id for the prefix),
    `echo` (also to circusd's stdout)."""

    def __init__(
        self,
        filename: str | None = None,
        model: str = "",
        echo: bool = False,
        sink: StdoutEcho | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(filename=filename, **kwargs)
        self.prefix = f"[{model}] ".encode()
        self.echo = bool(echo)
        self.sink = sink or _echo
        self._partial = b""

    def __call__(self, data: dict[str, Any]) -> None:
        super().__call__(data)
        if self.echo:
            self._lines(data["data"])

    def _lines(self, chunk: bytes | str) -> None:
        if isinstance(chunk, str):
            chunk = chunk.encode()
        pending = self._partial + chunk
        *lines, self._partial = pending.split(b"\n")
        while len(self._partial) > MAX_LINE:
            lines.append(self._partial[:MAX_LINE])
            self._partial = self._partial[MAX_LINE:]
        for line in lines:
            for start in range(0, max(len(line), 1), MAX_LINE):
                self.sink.put(self.prefix + line[start : start + MAX_LINE] + b"\n")

    def close(self) -> None:
        if self.echo and self._partial:
            self.sink.put(self.prefix + self._partial + b"\n")
            self._partial = b""
        super().close()
