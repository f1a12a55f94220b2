"""Seeing a model process exit: a pidfd per running model, with circus's `reap` and `stop` events
as the backup (within `check_delay`). Each exit is told to `on_exit(model, pid, exit_code)`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import zmq.asyncio

from . import pid_watch
from .circus_events import CircusEvents
from .watchers import Watchers

log = logging.getLogger("swapd.daemon")

OnExit = Callable[[str, int, int | None], object]
# The pid of a model's running process, if it has one (for circus's `stop` event, which has none).
PidOf = Callable[[str], int | None]


class ExitWatch:
    def __init__(self, watchers: Watchers, on_exit: OnExit) -> None:
        self.watchers = watchers
        self.on_exit = on_exit
        self._watches: dict[str, asyncio.Task[None]] = {}

    def watch(self, model_id: str, pid: int) -> None:
        self.unwatch(model_id)

        async def watch() -> None:
            await pid_watch.wait_exit(pid)
            code = await self.watchers.exit_code(pid)
            self.on_exit(model_id, pid, code)

        self._watches[model_id] = asyncio.get_running_loop().create_task(watch())

    def unwatch(self, model_id: str) -> None:
        task = self._watches.pop(model_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def tasks(self) -> list[asyncio.Task[None]]:
        return list(self._watches.values())

    async def follow_circus(
        self, endpoint: str, context: zmq.asyncio.Context, pid_of: PidOf
    ) -> None:
        """circusd's `reap`/`stop` events of model watchers, until cancelled."""
        events = CircusEvents(endpoint, context=context)
        try:
            async for event in events:
                if event.event == "reap" and event.pid is not None:
                    if event.exit_code is not None:
                        self.watchers.note_reaped(event.pid, event.exit_code)
                    self.on_exit(event.model, event.pid, event.exit_code)
                elif event.event == "stop":
                    pid = pid_of(event.model)
                    if pid is not None and not pid_watch.is_alive(pid):
                        self.on_exit(event.model, pid, self.watchers.reaped.get(pid))
        finally:
            events.close()
