"""circusd's event stream, narrowed to model watchers: `reap` (a process exited, with its exit
code) and `stop` (the watcher has no process left). circus notices exits only on its periodic
check (`check_delay`, 1 s in swapd's config), so these arrive within about a second."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.asyncio

from ...ipc import watcher_names

log = logging.getLogger(__name__)

WANTED = frozenset({"reap", "stop", "spawn", "kill"})


@dataclass(frozen=True)
class CircusEvent:
    watcher: str
    model: str
    event: str
    pid: int | None
    exit_code: int | None


def parse(topic: bytes, payload: bytes) -> CircusEvent | None:
    """`watcher.<name>.<event>` + JSON body -> CircusEvent, or None for anything else."""
    try:
        kind, rest = topic.decode().split(".", 1)
        name, event = rest.rsplit(".", 1)
    except (UnicodeDecodeError, ValueError):
        return None
    if kind != "watcher" or event not in WANTED or not watcher_names.is_model_watcher(name):
        return None
    try:
        model = watcher_names.model_id(name)
    except ValueError:
        return None
    data: dict[str, Any] = {}
    try:
        loaded = json.loads(payload or b"{}")
        if isinstance(loaded, dict):
            data = loaded
    except ValueError:
        pass
    pid = data.get("process_pid")
    code = data.get("exit_code")
    return CircusEvent(
        watcher=name,
        model=model,
        event=event,
        pid=int(pid) if isinstance(pid, int) else None,
        exit_code=int(code) if isinstance(code, int) else None,
    )


class CircusEvents:
    def __init__(self, endpoint: str, *, context: zmq.asyncio.Context | None = None) -> None:
        self._ctx = context or zmq.asyncio.Context.instance()
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"watcher." + watcher_names.PREFIX.encode())
        self._sock.connect(endpoint)

    async def __aiter__(self) -> AsyncIterator[CircusEvent]:
        while True:
            frames = await self._sock.recv_multipart()
            if len(frames) < 2:
                continue
            event = parse(frames[0], frames[1])
            if event is not None:
                yield event

    def close(self) -> None:
        self._sock.close(linger=0)
