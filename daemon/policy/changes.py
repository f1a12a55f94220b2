"""The scheduler's change signal: fired at every change a waiting swap may care about (a state, a
stop or a swap that ended, an unload, a busy reading). A waiter takes the event current when it
decided, and nothing awaits between its decision and its wait, so no change in between is missed.
"""

from __future__ import annotations

import asyncio
import contextlib


class Changes:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float | None) -> None:
        """Until the next change, or `timeout` seconds (None: no limit)."""
        event = self._event
        if timeout is None:
            await event.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
