"""The mirror's one state-change channel: whoever must act on a change of the daemon's state
listens here, and hears of it once the mirror holds it.

Each message of the daemon's (an event, or a snapshot) is applied to `ProxyState` first, then
told to every listener as one `Applied`: the message, the models whose status it set (with the
state each had before), and the model whose drain it began. Listeners are plain functions,
called in the order they began to listen, on the event loop, never awaited: admission (drain
acks, ignored websockets; `admission.py`), the events hub (`observe/events.py`), the access
line's config (`observe/access_log.py`) and, while they wait, loading streams (`loading.py`).
A request that must wait for the mirror to show something awaits `until`, which is a listener
for that long: no polling, and a bound that says how long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ...ipc.messages import Event, SnapshotReply

log = logging.getLogger(__name__)


# A model's runtime (`state.ModelRuntime`), which the mirror's state defines and this channel
# only carries.
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Applied(Generic[R]):
    """One of the daemon's messages, as the mirror now holds it."""

    message: Event | SnapshotReply
    # Each model whose status (or, for one the table or a snapshot dropped, whose state) was set,
    # with its state before: a status may change its reason and keep its state.
    models: tuple[tuple[R, str], ...] = ()
    # The model whose drain began (`Draining`; the epoch is its runtime's `drain_epoch`).
    draining: R | None = None


Listener = Callable[[Applied[Any]], object]


class Changes:
    """The listeners of one `ProxyState`, told of every message it applies."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        # A dict as an ordered set: listeners are told in the order they began to listen.
        self._listeners: dict[Listener, None] = {}

    def __len__(self) -> int:
        return len(self._listeners)

    def listen(self, listener: Listener) -> None:
        self._listeners[listener] = None

    def forget(self, listener: Listener) -> None:
        self._listeners.pop(listener, None)

    @contextlib.contextmanager
    def listening(self, listener: Listener) -> Iterator[None]:
        self.listen(listener)
        try:
            yield
        finally:
            self.forget(listener)

    def tell(self, applied: Applied) -> None:
        """Tell every listener; one that fails is logged and the others are told all the same
        (a drain ack must not wait on a bug in the events hub)."""
        for listener in list(self._listeners):
            try:
                listener(applied)
            except Exception:
                log.exception("a listener of the daemon's state changes failed")

    async def until(self, holds: Callable[[], bool], timeout: float) -> bool:
        """Wait until `holds()` is true: at once if it is, else as the change that makes it
        true is applied (checked then, not when this task runs next: another change may follow
        before it does). False when `timeout` seconds pass first."""
        if holds():
            return True
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def check(_: Applied) -> None:
            if not done.done() and holds():
                done.set_result(None)

        with self.listening(check):
            try:
                async with asyncio.timeout(timeout):
                    await done
            except TimeoutError:
                return False
        return True
