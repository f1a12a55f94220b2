"""The proxy's side of the daemon conversation: requests (ensure, unload, sleep, snapshot) and casts
(hello, activity, drained), over one `DaemonClient` DEALER.

Casts are fire-and-forget and never awaited on a request's path; `ensure` has no timeout of its
own (the client's lifetime bounds it) and is re-sent if the daemon restarts while it waits, since
the new daemon never saw it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from ...ipc.client import DaemonClient, DaemonUnavailable
from ...ipc.messages import (
    Activity,
    Drained,
    Ensure,
    EnsureCause,
    Error,
    GaveUp,
    Hello,
    Ready,
    Reply,
    Request,
    Sleep,
    Unload,
)
from ..floor.errors import BadGateway, ProxyError, Unavailable
from .state import ProxyState

log = logging.getLogger(__name__)

T = TypeVar("T", bound=Reply)


def answer(reply: Reply, expect: type[T]) -> T:
    """`reply` as the `expect` it should be: an `Error` reply is raised again as the error it
    names, any other reply is a 502 (the one error shape either way)."""
    if isinstance(reply, expect):
        return reply
    if isinstance(reply, Error):
        raise ProxyError.from_reply(reply)
    raise BadGateway(f"unexpected reply from the daemon: {type(reply).__name__}")


def make_proxy_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class DaemonLink:
    def __init__(
        self,
        client: DaemonClient,
        state: ProxyState,
        proxy_id: str | None = None,
        *,
        watching: Callable[[], int] = lambda: 0,
    ) -> None:
        self.client = client
        self.state = state
        self.proxy_id = proxy_id or make_proxy_id()
        self.pid = os.getpid()
        # How many `/api/events` clients this process has (the events hub's count), for Hello.
        self.watching = watching
        self._casts: set[asyncio.Task[None]] = set()

    # --- requests --------------------------------------------------------------------------------
    async def request(self, make: Callable[[int], Request], timeout: float | None = 10.0) -> Reply:
        return await self.client.request(make, timeout=timeout)

    async def ask(
        self, make: Callable[[int], Request], expect: type[T], timeout: float = 10.0
    ) -> T:
        """The daemon's `expect` reply to the request `make` builds (`answer`); no answer within
        `timeout` is a 503 `daemon_unavailable`."""
        try:
            reply = await self.client.request(make, timeout=timeout)
        except DaemonUnavailable as exc:
            raise Unavailable("the daemon did not answer", code="daemon_unavailable") from exc
        return answer(reply, expect)

    async def _until_answered(self, make: Callable[[int], Request]) -> Reply:
        """Send and wait without a deadline; resend if the daemon instance changes meanwhile."""
        while True:
            changed = self.state.instance_changed
            reply_task = asyncio.ensure_future(self.client.request(make, timeout=None))
            try:
                either: set[asyncio.Future[Any]] = {reply_task, changed}
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            except BaseException:
                reply_task.cancel()
                raise
            if reply_task.done():
                return reply_task.result()
            reply_task.cancel()
            log.info("daemon restarted while a request waited; sending it again")

    async def ensure(
        self, model: str, cause: EnsureCause = "request", *, waits: bool = True
    ) -> Ready | Error:
        sent: list[int] = []

        def make(i: int) -> Ensure:
            sent.append(i)
            return Ensure(id=i, model=model, proxy_id=self.proxy_id, cause=cause, waits=waits)

        try:
            reply = await self._until_answered(make)
        except asyncio.CancelledError:
            if sent and waits:
                # Its client went away: the daemon's swap must not count it as waiting.
                self.cast_soon(GaveUp(id=sent[-1]))
            raise
        if isinstance(reply, Ready | Error):
            return reply
        return Error(id=reply.id, status=502, code="bad_reply", message=f"unexpected {reply!r}")

    def ensure_soon(
        self, model: str, cause: EnsureCause, done: Callable[[Ready | Error], None]
    ) -> None:
        """`ensure` without waiting for it: `done` gets the reply (the daemon is told nobody
        waits for it)."""

        async def ensure() -> None:
            done(await self.ensure(model, cause, waits=False))

        task = asyncio.get_running_loop().create_task(ensure())
        self._casts.add(task)
        task.add_done_callback(self._casts.discard)

    async def unload(self, model: str | None, *, unless_in_use: bool = False) -> Reply:
        return await self._until_answered(
            lambda i: Unload(id=i, model=model, unless_in_use=unless_in_use)
        )

    async def sleep(self, model: str) -> Reply:
        return await self._until_answered(lambda i: Sleep(id=i, model=model))

    # --- casts -----------------------------------------------------------------------------------
    def cast_soon(self, message: msgspec.Struct) -> None:
        task = asyncio.get_running_loop().create_task(self.client.cast(message))
        self._casts.add(task)
        task.add_done_callback(self._casts.discard)

    async def hello(self) -> None:
        await self.client.cast(self._hello())

    def hello_soon(self) -> None:
        self.cast_soon(self._hello())

    def _hello(self) -> Hello:
        return Hello(proxy_id=self.proxy_id, pid=self.pid, watching=self.watching())

    def activity(
        self,
        model: str,
        in_flight: int,
        at: float | None = None,
        claimed: int = 0,
        websockets: int = 0,
    ) -> None:
        self.cast_soon(
            Activity(
                proxy_id=self.proxy_id,
                model=model,
                in_flight=in_flight,
                at=time.time() if at is None else at,
                claimed=claimed,
                websockets=websockets,
            )
        )

    def drained(self, model: str, epoch: int) -> None:
        self.cast_soon(Drained(proxy_id=self.proxy_id, model=model, epoch=epoch))

    def close(self) -> None:
        for task in self._casts:
            task.cancel()
        self.client.close()
