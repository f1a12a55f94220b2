"""The swap log: a bounded ring of what happened to the models (starts, swaps, stops, crashes,
sleeps and wakes), each with the duration of its phases and its cause, for the web UI's timeline
(`GET /api/swaps`, and `swap` events on `/api/events`).

The scheduler tells it each episode as it happens, as typed events (`policy/story.py`: began,
phase done, ended; the phases' durations come from the machinery that times them), and the
daemon why a start was asked for (`wanted`: a request, an explicit load, the preload hook); it
infers nothing and decides nothing. A record is kept, and published, once its episode ended. The
stops and sleeps of a swap's evicted models are records of their own (cause `swap`) and are
folded into the swap's (or the wake's) record as its drain, stop and sleep phases (the record
names them in `folded`).

Each model's last loads (a start's or a swap's own `start` and `health`) and wakes (`wake`) that
went well are kept apart from the ring (which other models' records push out): the median of
the last `ESTIMATE_LOADS` is its estimate (`estimates`: the loading progress and the web UI say
"about N s"; none before its first).

It is also told what a queued swap waits for (`waiting`: the scheduler parked it on a busy model,
collation, the queue, GPU room): what the target's status shows meanwhile (`waiting_now`), and,
once the target's start (or wake) is recorded, when its request came, how long it waited in all
and for what (`queued`, `waited`, `waited_for`), and why it was held back once its room was
decided (`deferred`: the story's `Deferred`, typed).
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from ...ipc.causes import DeferCause, StartCause, StopCause, WaitCause
from ...ipc.messages import Document, Event, QuerySwaps, SwapRecorded
from ...ipc.swap_record import SwapKind, SwapOutcome, SwapPhase, SwapRecord
from ..policy.story import Began, Deferred, Ended, Happening, PhaseDone

# How many records the ring keeps (the UI shows the recent ones; Prometheus keeps the figures).
RING_SIZE = 200
# How many of a model's last loads (and wakes) its estimate is the median of.
ESTIMATE_LOADS = 5

_encode = msgspec.json.Encoder().encode


class Publisher(Protocol):
    """The daemon's endpoint, as far as the swap log uses it."""

    def publish_nowait(self, make: Callable[[int], Event]) -> None: ...

    def reply(self, identity: bytes, reply: Document) -> Any: ...


@dataclass
class _Open:
    kind: SwapKind
    cause: StartCause | StopCause
    began: float
    phases: dict[SwapPhase, float] = field(default_factory=dict)
    phase_bytes: dict[SwapPhase, int] = field(default_factory=dict)
    evicted: tuple[str, ...] = ()
    for_model: str = ""
    queued: float = 0.0
    waited_for: tuple[str, ...] = ()
    deferred: tuple[DeferCause, ...] = ()
    folded: tuple[int, ...] = ()


@dataclass(frozen=True)
class WaitWhy:
    """Why a queued swap waits, as a type (the scheduler's `Parked`, on the wall clock): the
    cause, the models it names (collation: those whose queue is served first), and when it goes
    ahead at the latest (0: not bounded)."""

    cause: WaitCause
    serving: tuple[str, ...] = ()
    until: float = 0.0


@dataclass
class _Queued:
    """A swap queued for a target whose start has not begun yet."""

    since: float  # wall clock
    on: str = ""  # what it waits for now
    why: WaitWhy | None = None  # the same, as a type (None: not told)
    waited_for: list[str] = field(default_factory=list)
    deferred: list[DeferCause] = field(default_factory=list)
    recorded: bool = False  # a start's record carries its wait already


class SwapLog:
    def __init__(
        self,
        instance: str,
        endpoint: Publisher,
        size: int = RING_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.instance = instance
        self.endpoint = endpoint
        self.clock = clock
        self.records: deque[SwapRecord] = deque(maxlen=size)
        self.next_id = 1
        self._open: dict[str, _Open] = {}
        self._hints: dict[str, StartCause] = {}
        # Stops done for a swap to `target` whose start has not begun yet: target -> stops.
        self._evicted: dict[str, list[SwapRecord]] = {}
        self._queued: dict[str, _Queued] = {}
        self._loads: dict[str, deque[float]] = {}
        self._wakes: dict[str, deque[float]] = {}

    def register(self, on: Callable[..., None]) -> None:
        reply = self.endpoint.reply
        on(QuerySwaps, lambda i, m: reply(i, self.document(m)))

    def document(self, message: QuerySwaps) -> Document:
        return Document(id=message.id, body=_encode({"swaps": list(self.records)}))

    # ---------------------------------------------------------------------------- told

    def wanted(self, model_id: str, cause: StartCause) -> None:
        """The next start of `model_id` (if one follows) is for `cause` (a request, an explicit
        load, the preload)."""
        self._hints[model_id] = cause

    def waiting(self, target: str, on: str, since: float, why: WaitWhy | None = None) -> bool:
        """The swap to `target`, queued at `since` (wall clock), waits for `on` now ("": for
        nothing: it decides, or it claimed its room), and `why` as a type. True when that
        changed what it waits for (its status is to be published again)."""
        queued = self._queued.setdefault(target, _Queued(since))
        if on == queued.on and why == queued.why:
            return False
        queued.on, queued.why = on, why
        if on and on not in queued.waited_for:
            queued.waited_for.append(on)
        return True

    def swap_ended(self, target: str) -> bool:
        """The swap to `target` ended (its start recorded, or answered otherwise). True when it
        was waiting for something until then."""
        queued = self._queued.pop(target, None)
        return queued is not None and bool(queued.on)

    def waiting_now(self, target: str) -> tuple[str, float, WaitWhy | None] | None:
        """What the swap to `target` waits for now (in words, and as a type), and since when its
        request waits."""
        queued = self._queued.get(target)
        if queued is None or not queued.on:
            return None
        return queued.on, queued.since, queued.why

    def estimates(self, model_id: str) -> tuple[float | None, float | None]:
        """How long `model_id`'s load and its wake take, as its last ones went (None: none yet)."""
        return _median(self._loads.get(model_id)), _median(self._wakes.get(model_id))

    def told(self, event: Happening) -> None:
        """What the scheduler tells of a model's episode as it happens (`policy/story.py`)."""
        match event:
            case Began(kind=SwapKind.START | SwapKind.WAKE):
                self._open_start(event.model, event.adopted, event.kind)
            case Began():
                # A take-down or a crash: the scheduler tells its cause.
                assert event.cause is not None, event
                self._open[event.model] = _Open(
                    event.kind, event.cause, self.clock(), for_model=event.for_model
                )
            case PhaseDone():
                episode = self._open.get(event.model)
                if episode is not None:
                    episode.phases[event.phase] = round(event.seconds, 4)
                    if event.bytes:
                        episode.phase_bytes[event.phase] = event.bytes
            case Ended():
                self._ended(event)
            case Deferred(model=target, cause=cause):
                queued = self._queued.get(target)
                if queued is not None and cause not in queued.deferred:
                    queued.deferred.append(cause)

    # ---------------------------------------------------------------------------- inside

    def _ended(self, event: Ended) -> None:
        episode = self._open.get(event.model)
        if episode is not None and event.came_to is not None:
            episode.kind = event.came_to
        record = self._close(event.model, event.outcome, event.reason)
        if record is None or event.came_to is None:
            return
        if record.cause == StopCause.SWAP and record.for_model:
            # A stop or sleep for a swap: folded into that swap's record once its start begins.
            self._evicted.setdefault(record.for_model, []).append(record)

    def _open_start(self, model_id: str, adopted: bool, kind: SwapKind) -> None:
        """A start (or a wake: `kind`), a swap when it stopped or put models to sleep first."""
        hint = self._hints.pop(model_id, StartCause.REQUEST)
        cause = StartCause.ADOPTED if adopted else hint
        stops = self._evicted.pop(model_id, [])
        swapped = bool(stops) and kind is SwapKind.START
        episode = _Open(SwapKind.SWAP if swapped else kind, cause, self.clock())
        queued = self._queued.get(model_id)
        if queued is not None and not adopted and not queued.recorded:
            # One start per queued swap carries its request's wait (a restart does not).
            episode.queued, episode.waited_for = queued.since, tuple(queued.waited_for)
            episode.deferred = tuple(queued.deferred)
            queued.recorded = True
        if stops:
            episode.began = min(s.began for s in stops)
            episode.evicted = tuple(sorted(s.model for s in stops))
            episode.folded = tuple(s.id for s in stops)
            for name in (SwapPhase.DRAIN, SwapPhase.KV_SAVE, SwapPhase.STOP, SwapPhase.SLEEP):
                taken = [s.phases[name] for s in stops if name in s.phases]
                if taken:
                    episode.phases[name] = max(taken)
            moved = sum(
                s.phase_bytes.get(SwapPhase.KV_SAVE, 0)
                for s in stops
                if not isinstance(s.phase_bytes, msgspec.UnsetType)
            )
            if moved:
                episode.phase_bytes[SwapPhase.KV_SAVE] = moved
        self._open[model_id] = episode

    def _close(self, model_id: str, result: SwapOutcome, reason: str) -> SwapRecord | None:
        episode = self._open.pop(model_id, None)
        if episode is None:
            return None
        ended = self.clock()
        record = SwapRecord(
            id=self.next_id,
            kind=episode.kind,
            model=model_id,
            cause=episode.cause,
            began=episode.began,
            ended=ended,
            result=result,
            reason=reason,
            phases=episode.phases,
            phase_bytes=episode.phase_bytes or msgspec.UNSET,
            evicted=episode.evicted,
            for_model=episode.for_model,
            queued=episode.queued,
            waited=round(ended - episode.queued, 4) if episode.queued else 0.0,
            waited_for=episode.waited_for,
            deferred=episode.deferred or msgspec.UNSET,
            folded=episode.folded,
        )
        self.next_id += 1
        self.records.append(record)
        if result is SwapOutcome.OK:
            self._learn(record)
        self.endpoint.publish_nowait(
            lambda seq: SwapRecorded(instance=self.instance, seq=seq, record=record)
        )
        return record

    def _learn(self, record: SwapRecord) -> None:
        """A load or a wake that went well: how long the model's own part took."""
        phases = record.phases
        if record.kind in (SwapKind.START, SwapKind.SWAP) and record.cause != StartCause.ADOPTED:
            if SwapPhase.START in phases:
                taken = phases[SwapPhase.START] + phases.get(SwapPhase.HEALTH, 0.0)
                self._loads.setdefault(record.model, deque(maxlen=ESTIMATE_LOADS)).append(taken)
        elif record.kind is SwapKind.WAKE and SwapPhase.WAKE in phases:
            wakes = self._wakes.setdefault(record.model, deque(maxlen=ESTIMATE_LOADS))
            wakes.append(phases[SwapPhase.WAKE])


def _median(values: deque[float] | None) -> float | None:
    return round(statistics.median(values), 3) if values else None
