"""The swap log: a bounded ring of what happened to the models (starts, swaps, stops, crashes,
sleeps and wakes), each with the duration of its phases and its cause, for the web UI's timeline
(`GET /api/swaps`, and `swap` events on `/api/events`).

It is told what the scheduler does through the daemon's effects (every state change with its
reason and, for a stop, its cause; each phase's duration as the machinery measures it) and, by
the daemon, why a start was asked for (a request or the preload hook); it decides nothing. A
record is kept, and published, once its episode ended: a start when the model is ready (or
failed, or the start was aborted), a stop when the model is stopped, a sleep when it is asleep,
a wake when it is ready again (or failed: the stop and cold start that follow are records of
their own). The stops and sleeps of a swap's evicted models are records of their own (cause
`swap`) and are folded into the swap's (or the wake's) record as its drain, stop and sleep
phases (the record names them in `folded`).

It is also told what a queued swap waits for (`waiting`: the scheduler parked it on a busy model,
collation, the queue, GPU room): what the target's status shows meanwhile (`waiting_now`), and,
once the target's start (or wake) is recorded, when its request came, how long it waited in all
and for what (`queued`, `waited`, `waited_for`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from ...ipc.causes import DeferCause, StartCause, StopCause
from ...ipc.messages import Document, Event, QuerySwaps, SwapRecorded
from ...ipc.states import LEAVING_STATES, ModelState
from ...ipc.swap_record import SwapRecord

# How many records the ring keeps (the UI shows the recent ones; Prometheus keeps the figures).
RING_SIZE = 200

_encode = msgspec.json.Encoder().encode


class Publisher(Protocol):
    """The daemon's endpoint, as far as the swap log uses it."""

    def publish_nowait(self, make: Callable[[int], Event]) -> None: ...

    def reply(self, identity: bytes, reply: Document) -> Any: ...


@dataclass
class _Open:
    kind: str
    cause: StartCause | StopCause
    began: float
    phases: dict[str, float] = field(default_factory=dict)
    evicted: tuple[str, ...] = ()
    for_model: str = ""
    queued: float = 0.0
    waited_for: tuple[str, ...] = ()
    deferred: tuple[DeferCause, ...] = ()
    folded: tuple[int, ...] = ()


@dataclass
class _Queued:
    """A swap queued for a target whose start has not begun yet."""

    since: float  # wall clock
    on: str = ""  # what it waits for now
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
        self._state: dict[str, ModelState] = {}
        self._open: dict[str, _Open] = {}
        self._hints: dict[str, StartCause] = {}
        # Stops done for a swap to `target` whose start has not begun yet: target -> stops.
        self._evicted: dict[str, list[SwapRecord]] = {}
        self._queued: dict[str, _Queued] = {}

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

    def waiting(
        self, target: str, on: str, since: float, deferred: DeferCause | None = None
    ) -> bool:
        """The swap to `target`, queued at `since` (wall clock), waits for `on` now ("": for
        nothing: it decides, or it claimed its room); `deferred`: why its room was decided and
        it was held back all the same. True when that changed what it waits for (its status is
        to be published again)."""
        queued = self._queued.setdefault(target, _Queued(since))
        if deferred is not None and deferred not in queued.deferred:
            queued.deferred.append(deferred)
        if on == queued.on:
            return False
        queued.on = on
        if on and on not in queued.waited_for:
            queued.waited_for.append(on)
        return True

    def swap_ended(self, target: str) -> bool:
        """The swap to `target` ended (its start recorded, or answered otherwise). True when it
        was waiting for something until then."""
        queued = self._queued.pop(target, None)
        return queued is not None and bool(queued.on)

    def waiting_now(self, target: str) -> tuple[str, float] | None:
        """What the swap to `target` waits for now, and since when its request waits."""
        queued = self._queued.get(target)
        return (queued.on, queued.since) if queued is not None and queued.on else None

    def phase(self, model_id: str, phase: str, seconds: float) -> None:
        episode = self._open.get(model_id)
        if episode is not None:
            episode.phases[phase] = round(seconds, 4)

    def changed(
        self,
        model_id: str,
        state: ModelState,
        reason: str,
        *,
        cause: StopCause | None = None,
        for_model: str = "",
        adopted: bool = False,
    ) -> None:
        """`model_id` is in `state` now, for `reason`; `cause` says why it is being stopped
        (`for_model`: the model a swap stopped it for); `adopted`: a start is one of a process
        this daemon found."""
        before = self._state.get(model_id, ModelState.STOPPED)
        self._state[model_id] = state
        if state == before:
            return  # a new reason for the same state (the health check began)
        episode = self._open.get(model_id)
        if state == ModelState.STARTING:
            self._open_start(model_id, adopted)
        elif state == ModelState.WAKING:
            self._open_start(model_id, adopted, kind="wake")
        elif state in LEAVING_STATES:
            if episode is not None and episode.kind == "wake":
                # A wake that failed: its record ends here, and the stop that follows has its own.
                self._close(model_id, "failed", reason)
                episode = None
            if cause is not None and (episode is None or episode.kind not in ("stop", "sleep")):
                episode = _Open("stop", cause, self.clock(), for_model=for_model)
                self._open[model_id] = episode
            if episode is not None and episode.kind in ("stop", "sleep"):
                # Asleep it ends, unless its sleep fails (then it is stopped after all).
                episode.kind = "sleep" if state == ModelState.SLEEPING else "stop"
        elif state == ModelState.ASLEEP:
            record = self._close(model_id, "ok", reason)
            if record is not None and record.cause == StopCause.SWAP and record.for_model:
                self._evicted.setdefault(record.for_model, []).append(record)
        elif state == ModelState.READY:
            self._close(model_id, "ok", "")
        elif state == ModelState.FAILED:
            self._close(model_id, "failed", reason)
        elif state == ModelState.STOPPED:
            if episode is None:
                awake = before in (ModelState.READY, ModelState.ASLEEP)
                if awake and cause is StopCause.CRASH:
                    self._open[model_id] = _Open("crash", StopCause.CRASH, self.clock())
                    self._close(model_id, "ok", reason)
                return
            if episode.kind == "stop":
                record = self._close(model_id, "ok", reason)
                if record is not None and record.cause == StopCause.SWAP and record.for_model:
                    self._evicted.setdefault(record.for_model, []).append(record)
            else:
                self._close(model_id, "aborted", reason)

    # ---------------------------------------------------------------------------- inside

    def _open_start(self, model_id: str, adopted: bool, kind: str = "start") -> None:
        """A start (or a wake: `kind`), a swap when it stopped or put models to sleep first."""
        hint = self._hints.pop(model_id, StartCause.REQUEST)
        cause = StartCause.ADOPTED if adopted else hint
        stops = self._evicted.pop(model_id, [])
        episode = _Open("swap" if stops and kind == "start" else kind, cause, self.clock())
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
            for name in ("drain", "stop", "sleep"):
                taken = [s.phases[name] for s in stops if name in s.phases]
                if taken:
                    episode.phases[name] = max(taken)
        self._open[model_id] = episode

    def _close(self, model_id: str, result: str, reason: str) -> SwapRecord | None:
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
            evicted=episode.evicted,
            for_model=episode.for_model,
            queued=episode.queued,
            waited=round(ended - episode.queued, 4) if episode.queued else 0.0,
            waited_for=episode.waited_for,
            deferred=episode.deferred,
            folded=episode.folded,
        )
        self.next_id += 1
        self.records.append(record)
        self.endpoint.publish_nowait(
            lambda seq: SwapRecorded(instance=self.instance, seq=seq, record=record)
        )
        return record
