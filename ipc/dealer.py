"""A ZeroMQ DEALER with any number of concurrent requests, each reply matched to its request by id
and each wait bounded by its own timeout. Never REQ: a lost reply would wedge a REQ socket.

Both of swapd's request/reply clients stand on it: `ipc.client.DaemonClient` (msgpack, to the
daemon) and `daemon.circus_client.CircusClient` (JSON, to circusd).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import zmq
import zmq.asyncio

log = logging.getLogger(__name__)

R = TypeVar("R")


class Dealer(Generic[R]):
    def __init__(
        self,
        endpoint: str,
        decode: Callable[[bytes], tuple[Hashable, R]],
        *,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        """`decode(frame)` returns (request id, reply); whatever it raises marks a frame to skip."""
        self._decode = decode
        self._sock = (context or zmq.asyncio.Context.instance()).socket(zmq.DEALER)
        # Messages queued for a peer that is restarting go out once it binds again; on close, drop
        # them instead of blocking the process exit.
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(endpoint)
        self._pending: dict[Hashable, asyncio.Future[R]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def _read_loop(self) -> None:
        while True:
            frames = await self._sock.recv_multipart()
            try:
                request_id, reply = self._decode(frames[-1])
            except Exception as exc:
                log.warning("undecodable reply on a DEALER: %s (%r)", exc, frames[-1][:200])
                continue
            future = self._pending.pop(request_id, None)
            if future is not None and not future.done():
                future.set_result(reply)

    async def request(self, request_id: Hashable, payload: bytes, timeout: float | None) -> R:
        """Send `payload` and await the reply carrying `request_id`; `TimeoutError` after `timeout`
        seconds (`None` waits for ever: the caller bounds it by cancelling)."""
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read_loop())
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self._sock.send(payload)
            if timeout is None:
                return await future
            return await asyncio.wait_for(future, timeout)
        finally:
            self._pending.pop(request_id, None)

    async def send(self, payload: bytes) -> None:
        """Fire and forget: no reply is expected."""
        await self._sock.send(payload)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        for future in self._pending.values():
            if not future.done():
                future.cancel()
        self._pending.clear()
        with contextlib.suppress(zmq.ZMQError):
            self._sock.close(linger=0)
