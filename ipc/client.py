"""An asyncio DEALER client for the daemon's ROUTER: concurrent requests matched by id, each with a
timeout, plus fire-and-forget casts. Used by the proxy and by the `swapd` operator commands."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from swapd.ipc import codec
from swapd.ipc.messages import Reply

log = logging.getLogger(__name__)


class DaemonUnavailable(Exception):
    """The daemon did not answer in time (not running, restarting, or overloaded)."""


class DaemonClient:
    def __init__(self, endpoint: str, *, context: zmq.asyncio.Context | None = None) -> None:
        self._ctx = context or zmq.asyncio.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        # Queued messages to a restarting daemon are delivered once it binds again; on close, drop
        # them instead of blocking the process exit.
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(endpoint)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Reply]] = {}
        self._reader: asyncio.Task[None] | None = None

    def _ensure_reader(self) -> None:
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    async def _read_loop(self) -> None:
        while True:
            frames = await self._sock.recv_multipart()
            try:
                reply = codec.decode_reply(frames[-1])
            except msgspec.DecodeError as exc:
                log.warning("undecodable reply from daemon: %s", exc)
                continue
            future = self._pending.pop(reply.id, None)
            if future is not None and not future.done():
                future.set_result(reply)

    def next_id(self) -> int:
        return next(self._ids)

    async def request(self, make: Any, timeout: float | None = 10.0) -> Reply:
        """Send `make(id)` (a request struct factory taking the id) and await its reply.

        `timeout=None` waits for ever (an `ensure` can legitimately take minutes); the caller then
        bounds it with its own cancellation.
        """
        self._ensure_reader()
        request_id = self.next_id()
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self._sock.send(codec.encode(make(request_id)))
            if timeout is None:
                return await future
            return await asyncio.wait_for(future, timeout)
        except TimeoutError as exc:
            raise DaemonUnavailable(f"the daemon did not answer within {timeout:g}s") from exc
        finally:
            self._pending.pop(request_id, None)

    async def cast(self, message: msgspec.Struct) -> None:
        await self._sock.send(codec.encode(message))

    def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        for future in self._pending.values():
            if not future.done():
                future.cancel()
        self._pending.clear()
        with contextlib.suppress(zmq.ZMQError):
            self._sock.close(linger=0)
