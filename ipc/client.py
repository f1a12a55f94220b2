"""An asyncio client for the daemon's ROUTER: concurrent requests matched by id, each with a
timeout, plus fire-and-forget casts. Used by the proxy and by the `swapd` operator commands."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import msgspec
import zmq.asyncio

from . import codec
from .dealer import Dealer
from .messages import Reply, Request


class DaemonUnavailable(Exception):
    """The daemon did not answer in time (not running, restarting, or overloaded)."""


def _decode(frame: bytes) -> tuple[int, Reply]:
    reply = codec.decode_reply(frame)
    return reply.id, reply


class DaemonClient:
    def __init__(self, endpoint: str, *, context: zmq.asyncio.Context | None = None) -> None:
        self._dealer: Dealer[Reply] = Dealer(endpoint, _decode, context=context)
        self._ids = itertools.count(1)

    async def request(self, make: Callable[[int], Request], timeout: float | None = 10.0) -> Reply:
        """Send `make(id)` (a request struct factory taking the id) and await its reply.

        `timeout=None` waits for ever (an `ensure` can legitimately take minutes); the caller then
        bounds it with its own cancellation.
        """
        request_id = next(self._ids)
        try:
            return await self._dealer.request(request_id, codec.encode(make(request_id)), timeout)
        except TimeoutError as exc:
            raise DaemonUnavailable(f"the daemon did not answer within {timeout:g}s") from exc

    async def cast(self, message: msgspec.Struct) -> None:
        await self._dealer.send(codec.encode(message))

    def close(self) -> None:
        self._dealer.close()
