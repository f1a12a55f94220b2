"""The access log: one INFO line per request, from the `swapd.proxy.access` logger, in the proxy's
log stream (stderr, which circus keeps, and `/logs/stream/proxy`), written once the response is
complete; on at the config's `logLevel` info or debug (`AccessLines.follow`), off at warn and
error. The stamp is `logTimeFormat`'s when the config sets one (`ipc/log_time.py`).

    2026-12-01 08:16:51,123 INFO swapd-proxy[4242] swapd.proxy.access: 127.0.0.1
        "POST /v1/chat/completions" 200 1234B 12.3ms model=alpha waited=0.0ms    (one line)

The path is logged without its query (a `?token=` link must not end up in a log) and cut at
`PATH_LIMIT` characters; headers, keys and bodies never are. A model name (it comes from the
client's body) with a control character in it is written escaped, as Python's `ascii` writes it,
so no client can start a log line of its own. `waited` is the time the request spent
waiting for the daemon (a start, a swap, a drain). Every request also counts in its proxy's
`Stats` (`stats.py`).

A line per request through `logging` (a record, two formatters, a write to the pipe that circusd
reads) cost more than the rest of a request to a ready model. So the lines are formatted here, in
the stream's format, and written in batches: at most every `FLUSH_S`, or once `FLUSH_BYTES` are
waiting, one write to stderr and one to the `/logs` ring (`AccessLines`, one per proxy, in its
context). aiohttp makes an access logger per connection from a class: `access_logger` makes that
class for one proxy's counters, recorder and lines.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from ...ipc import log_time
from ...ipc.messages import SnapshotReply, TableChanged
from ...ipc.routing_table import RoutingTable
from ..floor.account import ACCOUNT, Account
from ..mirror.changes import Applied
from ..mirror.state import ModelRuntime
from .activity import Recorder
from .log_hub import LogHub
from .stats import Stats

LOGGER = logging.getLogger("swapd.proxy.access")
PATH_LIMIT = 200
FLUSH_S = 0.1
FLUSH_BYTES = 64 * 1024
_NONE = Account()


class AccessLines:
    """The access lines waiting to be written, and how they are written (the config's).
    `enabled` False: none at all, whatever the config says (a benchmark's `dispatch.Stages`)."""

    def __init__(self, hub: LogHub | None = None, *, enabled: bool = True) -> None:
        self.hub = hub
        self.enabled = enabled
        self._stream: list[str] = []
        self._ring: list[str] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None
        self._second = -1
        self._stamps = ("", "")
        self._prefix = f" INFO swapd-proxy[{os.getpid()}] {LOGGER.name}: "
        self.on = enabled  # the config's logLevel lets INFO through (follow)
        # `logTimeFormat` (ipc/log_time.py); stamp None: swapd's own, cached per second.
        self.time_format: str | None = None
        self.stamp: Callable[[int], str] | None = None

    def applied(self, applied: Applied[ModelRuntime]) -> None:
        """A listener of the mirror's changes: a snapshot's or a new table's config followed."""
        message = applied.message
        if isinstance(message, SnapshotReply | TableChanged):
            self.follow(message.table)

    def follow(self, table: RoutingTable) -> None:
        """The config's `logLevel` (the access lines are INFO, so `warn` and `error` turn them
        off) and `logTimeFormat` (the stamp of every line the proxy logs)."""
        self.on = self.enabled and table.log_level in ("debug", "info")
        if table.log_time_format != self.time_format:
            self.flush()  # the lines waiting keep the stamp they were made with
            self.time_format = table.log_time_format
            self.stamp = log_time.stamper(table.log_time_format)
            log_time.restamp(table.log_time_format)

    def add(self, message: str) -> None:
        if self.stamp is not None:
            stamp = self.stamp(time.time_ns())
            prefix = self._prefix if stamp else self._prefix[1:]
            self._stream.append(f"{stamp}{prefix}{message}\n")
            self._ring.append(f"[{stamp}] [INFO] {message}\n" if stamp else f"[INFO] {message}\n")
        else:
            now = time.time()
            second = int(now)
            if second != self._second:
                self._second = second
                local = time.localtime(now)
                self._stamps = (
                    time.strftime("%Y-%m-%d %H:%M:%S", local),
                    time.strftime("[%Y-%m-%d %H:%M:%S] [INFO] ", local),
                )
            stamp, ring_stamp = self._stamps
            self._stream.append(f"{stamp},{int(now * 1000) % 1000:03d}{self._prefix}{message}\n")
            self._ring.append(f"{ring_stamp}{message}\n")
        self._size += len(message)
        if self._size >= FLUSH_BYTES:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_S, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._stream:
            return
        stream, self._stream = "".join(self._stream), []
        ring, self._ring = "".join(self._ring), []
        self._size = 0
        try:
            sys.stderr.write(stream)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        if self.hub is not None:
            self.hub.feed(ring.encode())


def access_logger(
    stats: Stats, recorder: Recorder, lines: AccessLines
) -> type[AbstractAccessLogger]:
    """The accounting stage, as the access logger class aiohttp makes one of per connection
    (`access_log_class`), for one proxy's counters, activity recorder and access lines."""

    class AccessLog(AbstractAccessLogger):
        def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
            stats.requests += 1
            account = request.get(ACCOUNT, _NONE)
            if account.route:
                recorder.note(request, response, account)
            if not lines.on:
                return
            path = request.rel_url.raw_path
            if len(path) > PATH_LIMIT:
                path = path[:PATH_LIMIT] + "..."
            model = account.model
            if not model.isprintable():
                # A name from a client's body: a newline in it must not start a line of its own.
                model = ascii(model)
            lines.add(
                f'{request.remote or "-"} "{request.method} {path}" {response.status} '
                f"{response.body_length}B {time * 1000:.1f}ms model={model} "
                f"waited={account.waited * 1000:.1f}ms"
            )

        @property
        def enabled(self) -> bool:
            return True

    return AccessLog
