"""The combined log (`/logs`, `/logs/stream`): this proxy process's own lines and every model's
output, in the order they arrived, kept in one ring and fanned out live.

Model output reaches the proxy only through the models' log files (circus writes them), and its
lines carry no time of their own, so the order of arrival is the one order there is. Before each
of the proxy's own lines goes into the ring, whatever the model files gained is put in first (a
stat per file, microseconds), so a model line written before a proxy line was logged is always
before it; between the proxy's lines a task does the same every `FOLLOW_POLL_S`, so model output
also streams while the proxy is quiet. Lines are prefixed `[<model id>] `. The models' lines from
before this process started (each file's last `HISTORY_BYTES`) come first, one model after
another, the file written to last at the end: they are older than anything this process logged.

The models' lines alone, in the same order, are kept too (`upstream`): the history of
`/api/events`' `upstream` log, in time order as llama-swap's one upstream log has it.

Files are read on the loop, not in a thread, so that the catch-up before a proxy line is never
racing a read of the same file; a read takes at most `READ_MAX` (the rest comes next time).

It is the one follower of the models' log files in the process: besides the combined ring it
keeps the models' lines alone (`upstream`, prefixed) and each model's own output (`model`, as
written), each with its live subscribers (`/logs/stream/upstream`, `/logs/stream/<model>`,
`/api/events`' upstream `logData`). So following the logs costs a stat per model every
`FOLLOW_POLL_S`, whatever the number of clients, and a client's history is a ring's (at most
`HISTORY_BYTES`). A file that grew by more than `READ_MAX` is read a piece at a time, the next at
once, so a model writing fast is followed at the pace of the disk, in pieces of bounded size.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

from aiohttp import web

from ..mirror.state import ProxyState
from .backlog import FANOUT_BYTES_S, Budget
from .log_files import FOLLOW_POLL_S, model_log_path, prefixed, tail_of
from .log_hub import HISTORY_BYTES, LogHub, TextRing

log = logging.getLogger(__name__)

# The proxy's ring and each model's file keep HISTORY_BYTES each; the combined one room for a few.
COMBINED_BYTES = 4 * HISTORY_BYTES
READ_MAX = 1024 * 1024


class _File:
    __slots__ = ("inode", "offset", "path", "pending", "ring")

    def __init__(self, path: Path, offset: int, history: bytes) -> None:
        self.path = path
        self.offset = offset
        self.inode: int | None = None
        self.pending = bytearray()
        self.ring = TextRing(HISTORY_BYTES)  # the model's own output, as written
        self.ring.seed(history)


def _changed(files: dict[str, _File]) -> list[tuple[str, _File, os.stat_result]]:
    """The files whose size or inode moved, with what their stat found: a stat each
    (microseconds on a local file)."""
    out = []
    for model_id, f in files.items():
        try:
            stat = os.stat(f.path)
        except OSError:
            continue
        if stat.st_size != f.offset or stat.st_ino != f.inode:
            out.append((model_id, f, stat))
    return out


def _read_new(f: _File, stat: os.stat_result) -> bytes:
    """What `f` gained since its offset (`stat`: its size and inode now), `READ_MAX` at most (a
    rotated or truncated file from its start)."""
    if (f.inode is not None and stat.st_ino != f.inode) or stat.st_size < f.offset:
        f.offset = 0
    f.inode = stat.st_ino
    if stat.st_size <= f.offset:
        return b""
    try:
        with f.path.open("rb") as handle:
            handle.seek(f.offset)
            data = handle.read(min(stat.st_size - f.offset, READ_MAX))
    except OSError:
        return b""
    f.offset += len(data)
    return data


class CombinedLog(TextRing):
    def __init__(self, hub: LogHub, state: ProxyState) -> None:
        super().__init__(COMBINED_BYTES)
        self._hub = hub
        self._state = state
        self._files: dict[str, _File] = {}
        self._log_dir: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._exit = contextlib.ExitStack()
        self.upstream = TextRing(HISTORY_BYTES)  # the models' lines only, in the same order
        self._stepping = asyncio.Lock()  # one look at the table and the files at a time
        # What the `/logs/stream*` readers cost together (`backlog.Shared`).
        self.fanout = Budget(FANOUT_BYTES_S)
        # What following costs (`/running`): looks at the files, and the stats they took.
        self.looks = 0
        self.stats = 0

    async def upstream_history(self) -> bytes:
        """The models' recent lines in the order they came, up to this moment."""
        with contextlib.suppress(Exception):
            await self._step()
        return self.upstream.history()

    def start(self) -> None:
        self._ring += self._hub.history()
        self._exit.enter_context(self._hub.subscribe(self))
        self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        self._exit.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def counters(self) -> dict[str, int]:
        return {"followed": len(self._files), "looks": self.looks, "stats": self.stats}

    def following(self) -> frozenset[str]:
        """The models whose log files are followed now (from where they ended when taken up)."""
        return frozenset(self._files)

    async def model(self, model_id: str) -> TextRing | None:
        """A model's own output: its recent text and its live subscribers (None: not a model
        of the table)."""
        with contextlib.suppress(Exception):
            await self._step()
        f = self._files.get(model_id)
        return f.ring if f is not None else None

    def put_nowait(self, data: bytes) -> None:
        """The proxy's own lines, as `LogHub` offers them to a subscriber: the models' output
        written before them goes first."""
        with contextlib.suppress(Exception):  # not logged: this runs inside a log handler
            self._catch_up()
        self.put(data)

    def _catch_up(self) -> bool:
        """Whatever the files gained; True when one has more than a read took."""
        self.looks += 1
        self.stats += len(self._files)
        more = False
        for model_id, f, stat in _changed(self._files):
            data = _read_new(f, stat)
            if not data:
                continue
            f.ring.put(data)
            out = prefixed(model_id, data, f.pending)
            if out:
                self.put(out)
                self.upstream.put(out)
            more = more or len(data) == READ_MAX
        return more

    async def _step(self) -> bool:
        async with self._stepping:
            await self._follow_table()
            return self._catch_up()

    async def _run(self) -> None:
        while True:
            more = False
            try:
                more = await self._step()
            except Exception:  # never let the combined log stop following
                log.exception("following the model logs failed")
            await asyncio.sleep(0 if more else FOLLOW_POLL_S)

    async def _follow_table(self) -> None:
        routes = self._state.routes
        if routes.table.generation < 0:
            return  # no table yet: no models, no log directory
        first = self._log_dir is None
        ids = [m.id for m in routes.table.models]
        if routes.log_dir != self._log_dir:
            self._files.clear()
            self._log_dir = routes.log_dir
        for gone in set(self._files) - set(ids):
            del self._files[gone]
        seeds: list[tuple[float, bytes]] = []
        for model_id in ids:
            if model_id in self._files:
                continue
            path = model_log_path(routes.log_dir, model_id)
            data, end = await asyncio.to_thread(tail_of, path)
            # A model the table gained: its own history, but its lines in the combined views
            # from now on.
            if first and data:
                ended = data if data.endswith(b"\n") else data + b"\n"
                seeds.append((_modified(path), prefixed(model_id, ended, bytearray())))
            self._files[model_id] = _File(path, end, data)
        if seeds:
            # Older than everything this process logged, which the ring already holds; the
            # model written to last goes last.
            seed = b"".join(data for _, data in sorted(seeds, key=lambda s: s[0]))
            self.seed(seed)
            self.upstream.seed(seed)


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


COMBINED_KEY: web.AppKey[CombinedLog] = web.AppKey("swapd_combined_log", CombinedLog)
