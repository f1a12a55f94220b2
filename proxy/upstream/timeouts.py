"""How the lean pool (`pool.py`) applies a model's `timeouts` (llama-swap's keys, as Go's
http.Transport reads them): `connect` bounds the TCP connect, `keepalive` sets TCP keep-alive
probes, `responseHeader` bounds the wait for the response head once the request is sent, and
`idleConn` bounds how long a kept-alive connection sits unused in the pool."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Protocol, TypeVar

from ..floor.errors import HeadTimeout

T = TypeVar("T")


class _Idle(Protocol):
    idle_since: float
    idle_limit: float


def set_keepalive(transport: asyncio.BaseTransport, seconds: float) -> None:
    """TCP keep-alive probes after `seconds` idle, then every `seconds` (Go's Dialer.KeepAlive);
    0: the system's default (off)."""
    sock = transport.get_extra_info("socket")
    if sock is None or seconds <= 0:
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        every = max(1, int(seconds))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, every)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, every)


async def head_within(waiter: asyncio.Future[T], seconds: float) -> T:
    try:
        async with asyncio.timeout(seconds):
            return await waiter
    except TimeoutError:
        raise HeadTimeout(
            f"timeout awaiting response headers ({seconds:g}s, timeouts.responseHeader)"
        ) from None


def expired(conn: _Idle, now: float) -> bool:
    """Whether a pooled connection has sat idle past its `idleConn` (0: no limit)."""
    return conn.idle_limit > 0 and now - conn.idle_since > conn.idle_limit
