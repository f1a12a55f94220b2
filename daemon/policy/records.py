"""What the scheduler keeps per model, the handle of a running model, what it reads of the world
(`Readings`) and the `Effects` it tells.

The effects are told, never asked (as llama-swap's `internal/router/scheduler` `Effects`): each
call receives everything it needs as arguments, and nothing on the other side reads the
scheduler's state. What the scheduler needs to know of the world (requests in flight, busy
checks, GPU memory) it reads through `Readings`, before it decides.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ...ipc.causes import StopCause, WaitCause
from ...ipc.routing_table import SleepSetting
from ...ipc.states import ModelState
from ..config import ModelConfig
from .eviction.contract import BusyReading, Decision, GpuRoom, Occupant
from .story import Happening


class RunningModel(Protocol):
    """The handle of a model process: where it serves, which process it is, since when."""

    @property
    def upstream(self) -> str: ...

    @property
    def pid(self) -> int: ...

    @property
    def started_at(self) -> float: ...  # wall clock


H = TypeVar("H", bound=RunningModel)


@dataclass(frozen=True)
class Stop:
    """Why a model was (or is being) stopped or put to sleep: the cause, and for a swap the model
    it made room for. `text` is the reason a person reads, rendered from it."""

    cause: StopCause
    for_model: str = ""  # SWAP: the model it was swapped out for
    detail: str = ""  # CRASH: the process and its exit code; *_FAILED: what went wrong
    # The take-down ends asleep (its process kept, its GPU memory given back), not stopped.
    sleep: bool = False

    @property
    def text(self) -> str:
        if self.sleep and self.cause is not StopCause.SLEEP:
            return f"{self._words()} (asleep)"
        return self._words()

    def _words(self) -> str:
        match self.cause:
            case StopCause.SWAP:
                return f"swapped out for {self.for_model}"
            case StopCause.UNLOAD:
                return "unloaded"
            case StopCause.TTL:
                return "ttl expired"
            case StopCause.RELOAD:
                return "config changed"
            case StopCause.SHUTDOWN:
                return "swapd is shutting down"
            case StopCause.CRASH:
                return self.detail
            case StopCause.UNHEALTHY:
                return "was starting when the daemon restarted; not healthy"
            case StopCause.SLEEP:
                return "asked to sleep"
            case StopCause.SLEEP_FAILED:
                return f"its sleep failed, so it was stopped: {self.detail}"
            case StopCause.WAKE_FAILED:
                return f"its wake failed, so it was stopped to start again: {self.detail}"
            case StopCause.WAKE_UNVERIFIED:
                return f"its wake was not verified, so it was stopped to start again: {self.detail}"
            case StopCause.ASLEEP_TTL:
                return "asleep and unused longer than its sleep.stopAfter"


@dataclass
class ModelRecord(Generic[H]):
    id: str
    state: ModelState = ModelState.STOPPED
    since: float = field(default_factory=time.time)
    handle: H | None = None  # while a process exists
    model: ModelConfig | None = None  # the definition the process was started with
    reason: str = ""  # what a person reads: rendered from `stop`, or a start's failure
    # Why it is draining, stopping or stopped (or why its start was aborted); None otherwise.
    stop: Stop | None = None
    # Its process was found by this daemon (running, or starting: then this is its start).
    adopted: bool = False
    failures: int = 0
    retry_at: float = 0.0  # monotonic
    # While asleep: the sleep setting it was put to sleep with (its wake sends those calls).
    asleep_with: SleepSetting | None = None


@dataclass(frozen=True)
class Parked:
    """Why a queued swap waits, as a type: the cause, the loaded models whose queue it serves
    first (collation), and when it goes ahead at the latest (monotonic; None: not bounded)."""

    cause: WaitCause
    serving: tuple[str, ...] = ()
    at_latest: float | None = None


@dataclass(frozen=True)
class Activity:
    """What the proxies report of a model."""

    in_flight: bool  # requests in flight for it, in any live proxy
    last: float = 0.0  # wall clock of its last reported request


class Readings(Protocol):
    """What the scheduler reads of the world before it decides (the proxies' reports, the busy
    checks, the GPUs); never while it decides."""

    def activity(self, model_id: str) -> Activity: ...

    def busy(self, model_id: str) -> BusyReading | None:
        """Its busyCheck's last reading (a model without one: None)."""
        ...

    async def check_busy(self, models: frozenset[str]) -> None:
        """Read the busy checks of `models` once more, now."""
        ...

    async def gpus(self, target: ModelConfig, occupants: Sequence[Occupant]) -> GpuRoom:
        """The GPUs' memory, for a decision that places `target` by memory (reads NVML, /proc)."""
        ...

    def swap_in_cost(self, model_id: str, *, waking: bool) -> float | None:
        """Seconds bringing `model_id` back takes, as its last loads (its last wakes, `waking`)
        went (the swap log's median); None before the first."""
        ...


class Effects(Protocol[H]):
    async def start(self, model: ModelConfig) -> H:
        """Start the model's process and wait until it is healthy. Raises an `EnsureError` (a
        `StartFailed`) when it does not become healthy; a cancelled start stops its process."""
        ...

    async def drain(self, model_id: str) -> None:
        """Phase one of a stop: until every live proxy has no request in flight for it. May be
        cancelled (a request for the model came first: it serves again)."""
        ...

    async def stop(
        self,
        model_id: str,
        handle: H,
        model: ModelConfig | None,
        *,
        start_follows: bool,
        save: bool = False,
    ) -> None:
        """Phase two: the process is gone (and what it held given back, or reported). `model` is
        the definition it was started with; `start_follows` says that a swap starts another
        model right after, so that stop may leave slow bookkeeping until that start spawned;
        `save`: the model may well be asked for again, so what its server can hand back (its
        conversation caches, `kvCache`) is saved first."""
        ...

    async def sleep(
        self, model_id: str, handle: H, model: ModelConfig | None, setting: SleepSetting
    ) -> None:
        """Phase two of a sleep (after the drain): the server is told to give its GPU memory back
        (`setting.sleep`'s calls), and that the memory came back is checked. Raises
        `SleepFailed` (why) when a call fails or times out, or the memory stays held; the process
        is left as it is (the scheduler stops it)."""
        ...

    async def wake(
        self, model_id: str, handle: H, model: ModelConfig | None, setting: SleepSetting
    ) -> None:
        """The server is told to take its memory back (`setting.wake`'s calls), then health
        checked. Raises `WakeFailed` (why) when a call or the health check fails or times out;
        the process is left as it is (the scheduler stops it, then starts it cold). A cancelled
        wake stops the process, as a cancelled start does."""
        ...

    def changed(self, record: ModelRecord[H], model: ModelConfig | None) -> None:
        """A model's state changed (publish it); `model` is its definition in the config now."""
        ...

    def happened(self, event: Happening) -> None:
        """A step of a model's swap story (`story.py`: an episode began or ended), told after
        the state change it goes with. The daemon's swap log records it."""
        ...

    def decided(self, target: ModelConfig, decision: Decision) -> None:
        """What the eviction policy decided for a swap to `target`, each time it decides. The
        daemon logs it, books a placement by memory, and shows which busy models a swap waits
        for."""
        ...

    def waiting(self, target: str, on: str, queued_at: float, parked: Parked | None = None) -> None:
        """The swap to `target`, queued at `queued_at` (the scheduler's clock), waits for `on`
        now ("": for nothing: it was just queued, or it claimed its room and goes ahead), and
        why as a type (`parked`). The daemon shows it on the target's status and keeps it for
        the target's swap record."""
        ...

    def ended(self, target: str) -> None:
        """The swap to `target` ended (its target ready or failed, or answered otherwise): it
        waits for nothing any more."""
        ...
