"""What the scheduler keeps per model, the handle of a running model, and the `Effects` it tells.

The effects are told, never asked (as llama-swap's `internal/router/scheduler` `Effects`): each
call receives everything it needs as arguments, and nothing on the other side reads the
scheduler's state.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ...ipc.model_status import ModelState
from ...ipc.states import LOADED_STATES
from ..config import ModelConfig
from ..errors import EnsureError

__all__ = ["LOADED_STATES", "Effects", "ModelRecord", "RunningModel", "Swap"]


class RunningModel(Protocol):
    """The handle of a model process: where it serves and which process it is."""

    @property
    def upstream(self) -> str: ...

    @property
    def pid(self) -> int: ...


H = TypeVar("H", bound=RunningModel)


@dataclass
class ModelRecord(Generic[H]):
    id: str
    state: ModelState = "stopped"
    since: float = field(default_factory=time.time)
    handle: H | None = None  # while a process exists
    model: ModelConfig | None = None  # the definition the process was started with
    reason: str = ""
    failures: int = 0
    retry_at: float = 0.0  # monotonic
    ready_at: float = 0.0  # monotonic, for TTL when no activity was reported yet


class Effects(Protocol[H]):
    async def start(self, model: ModelConfig) -> H:
        """Start the model's process and wait until it is healthy. Raises an `EnsureError` (a
        `StartFailed`) when it does not become healthy; a cancelled start stops its process."""
        ...

    async def drain(self, model_id: str) -> None:
        """Phase one of a stop: until every live proxy has no request in flight for it. May be
        cancelled (a request for the model came first: it serves again)."""
        ...

    def busy(self, model_id: str) -> bool:
        """Whether the proxies report requests in flight for the model (a swap that must stop
        it waits, within its collation window, rather than start draining it)."""
        ...

    async def stop(
        self, model_id: str, handle: H, model: ModelConfig | None, *, start_follows: bool
    ) -> None:
        """Phase two: the process is gone (and what it held given back, or reported). `model` is
        the definition it was started with; `start_follows` says that a swap starts another
        model right after, so that stop may leave slow bookkeeping until that start spawned."""
        ...

    def changed(self, record: ModelRecord[H], model: ModelConfig | None) -> None:
        """A model's state changed (publish it); `model` is its definition in the config now."""
        ...


@dataclass
class Swap(Generic[H]):
    target: str
    # What the ensures await. Separate from the task so that an unload or a shutdown can answer
    # them at once while the task still cleans up (an aborted start stops its process first).
    result: asyncio.Future[H]
    task: asyncio.Task[None] | None = None
    evict: frozenset[str] = frozenset()
    claimed: bool = False
    starting: asyncio.Task[H | None] | None = None  # effects.start under way
    model: ModelConfig | None = None  # the definition being started
    failed: EnsureError | None = None  # unloaded / shutting down: the waiters got this
    why: str = ""  # the model's reason when its start is aborted
    restart: bool = False  # a reload changed the definition being started
    gpus: tuple[str, ...] | None = None  # `gpus: auto`: where placement put it
    place_deadline: float | None = None  # `gpus: auto`: waiting for busy models until then
    # The queue: higher priority first, then arrival order (`seq`), from `queued_at` (monotonic).
    priority: int = 0
    seq: int = 0
    queued_at: float = 0.0
    # When a request for a model it was draining took that model back (collation).
    yielded_at: float | None = None


def retrieve(future: asyncio.Future[H]) -> None:
    # Every waiter may have given up: the outcome is still consumed (no "never retrieved" noise).
    if not future.cancelled():
        future.exception()
