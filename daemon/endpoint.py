"""The daemon's endpoint (as circus's `controller.py` is its arbiter's): the two sockets, one
dispatch table keyed by message type, and the sequenced publisher. It decides nothing; the
`Daemon` (supervisor.py) registers a handler per message type.

* a ROUTER (`daemon.sock`): requests, each answered by one reply with its `id`, and casts;
* a PUB (`events.sock`): events, each with the daemon's `instance` and a `seq` that grows by one.

Both are bound under umask 0o177, so the socket files are 0600; circusd's two sockets are chmodded
to 0600 too (circusd created them under whatever umask it was started with).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import zmq
import zmq.asyncio

from ..ipc import codec
from ..ipc.endpoints import Endpoints
from ..ipc.messages import Error, Event, Inbound, Reply

log = logging.getLogger("swapd.daemon")

M = TypeVar("M", bound=Inbound)
# A handler gets the sender's identity (for the reply) and the message.
Handler = Callable[[bytes, M], Awaitable[None] | None]
MakeEvent = Callable[[int], Event]


class Endpoint:
    def __init__(self, endpoints: Endpoints, instance: str, context: zmq.asyncio.Context) -> None:
        self.endpoints = endpoints
        self.instance = instance
        self.ctx = context
        self.seq = 0
        # Messages received by type name (and "invalid"), for `StatusReply.received`.
        self.received: Counter[str] = Counter()
        self.router: zmq.asyncio.Socket | None = None
        self.pub: zmq.asyncio.Socket | None = None
        self._handlers: dict[type[Any], tuple[Handler[Any], bool]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def on(self, kind: type[M], handler: Handler[M], *, spawn: bool = False) -> None:
        """Handle every `kind` message with `handler`. A `spawn` handler runs as its own task, so
        a slow request (an Ensure waiting for a start) never holds the socket up; any other is
        awaited before the next message is read (a snapshot then matches its `seq`)."""
        self._handlers[kind] = (handler, spawn)

    # ----------------------------------------------------------------------------- sockets

    def bind(self) -> None:
        old = os.umask(0o177)
        try:
            self.router = self.ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            # A reconnecting DEALER that reuses an identity must not be refused.
            self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)
            self.router.bind(self.endpoints.daemon)
            self.pub = self.ctx.socket(zmq.PUB)
            self.pub.setsockopt(zmq.LINGER, 0)
            self.pub.setsockopt(zmq.SNDHWM, 100_000)
            self.pub.bind(self.endpoints.events)
        finally:
            os.umask(old)
        for sock in (self.endpoints.circus_ctl, self.endpoints.circus_pub):
            with contextlib.suppress(OSError):
                os.chmod(sock.removeprefix("ipc://"), 0o600)

    def close(self) -> None:
        for sock in (self.router, self.pub):
            if sock is not None:
                sock.close(linger=0)

    def tasks(self) -> list[asyncio.Task[None]]:
        return list(self._tasks)

    # ---------------------------------------------------------------------------- publish

    def _next_event(self, make: MakeEvent) -> bytes:
        self.seq += 1
        return codec.encode(make(self.seq))

    async def publish(self, make: MakeEvent) -> None:
        if self.pub is None:
            self.seq += 1
            return
        await self.pub.send(self._next_event(make))

    def publish_nowait(self, make: MakeEvent) -> None:
        # Encoded (and its seq taken) now, so events keep the order of the state changes.
        if self.pub is None:
            self.seq += 1
            return
        # A PUB send never blocks (at the high-water mark it drops), so no need to await it.
        self.pub.send(self._next_event(make))

    # --------------------------------------------------------------------------- requests

    async def reply(self, identity: bytes, reply: Reply) -> None:
        assert self.router is not None
        await self.router.send_multipart([identity, codec.encode(reply)])

    async def serve(self) -> None:
        """Receive and dispatch until cancelled; a failing handler is logged, never fatal."""
        assert self.router is not None
        while True:
            frames = await self.router.recv_multipart()
            if len(frames) < 2:
                continue
            try:
                await self.dispatch(frames[0], frames[-1])
            except Exception:
                log.exception("error handling a message")

    async def dispatch(self, identity: bytes, payload: bytes) -> None:
        try:
            message = codec.decode_inbound(payload)
        except codec.DecodeError as exc:
            self.received["invalid"] += 1
            request_id = _guess_id(payload)
            log.warning("malformed message (%d bytes): %s", len(payload), exc)
            if request_id is not None:
                await self.reply(
                    identity,
                    Error(
                        id=request_id,
                        status=400,
                        code="bad_request",
                        message=f"malformed or unknown message: {exc}",
                    ),
                )
            return
        self.received[type(message).__name__] += 1
        entry = self._handlers.get(type(message))
        if entry is None:
            return
        handler, spawn = entry
        result = handler(identity, message)
        if result is None:
            return
        if not spawn:
            await result
            return
        task: asyncio.Task[None] = asyncio.ensure_future(result)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("error handling a request", exc_info=task.exception())


def _guess_id(payload: bytes) -> int | None:
    """The `id` of an undecodable request, so its sender still gets an error reply."""
    with contextlib.suppress(Exception):
        raw = msgspec.msgpack.decode(payload)
        if isinstance(raw, dict) and isinstance(raw.get("id"), int):
            return int(raw["id"])
    return None
