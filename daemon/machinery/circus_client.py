"""A small asyncio client for circusd's control socket (JSON over a DEALER, replies matched by id).

circus's own `AsyncCircusClient` hangs when two calls overlap and never applies its timeout, so
the daemon uses this one: any number of concurrent calls, each with its own deadline.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import zmq.asyncio

from ...ipc.dealer import Dealer
from ..errors import CircusError, CircusUnavailable

__all__ = ["CircusClient", "CircusError", "CircusUnavailable"]


def _decode(frame: bytes) -> tuple[str, dict[str, Any]]:
    reply = json.loads(frame)
    return str(reply.get("id")), reply


class CircusClient:
    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = 10.0,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._dealer: Dealer[dict[str, Any]] = Dealer(endpoint, _decode, context=context)

    async def call(
        self, command: str, *, timeout: float | None = None, **properties: Any
    ) -> dict[str, Any]:
        """One command: the reply on `ok`; CircusError on `error`, CircusUnavailable on timeout."""
        call_id = uuid.uuid4().hex
        message = {"id": call_id, "command": command, "properties": properties}
        try:
            reply = await self._dealer.request(
                call_id, json.dumps(message).encode(), timeout or self.timeout
            )
        except TimeoutError as exc:
            raise CircusUnavailable(
                f"circusd did not answer {command!r} within {timeout or self.timeout:g}s"
            ) from exc
        if reply.get("status") != "ok":
            raise CircusError(
                command, str(reply.get("reason", "unknown error")), reply.get("errno")
            )
        return reply

    async def call_locked(
        self, command: str, *, patience: float = 60.0, **properties: Any
    ) -> dict[str, Any]:
        """A lifecycle command (add, start, stop, rm): retried while circus's global lock is held
        by another command (its own periodic `manage_watchers`, or a stop started elsewhere)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + patience
        delay = 0.01
        while True:
            try:
                return await self.call(command, **properties)
            except CircusError as exc:
                if not exc.lock_busy or loop.time() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)

    def close(self) -> None:
        self._dealer.close()
