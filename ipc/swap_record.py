"""Swap records: the web UI's timeline (`GET /api/swaps`, `/api/events` type `swap`), and the
names a record is made of: its kind, its outcome, its phases. Each is a `StrEnum`, so on the wire
and in JSON a record reads as it always did: the value."""

from __future__ import annotations

from enum import StrEnum

import msgspec

from .causes import DeferCause


class SwapKind(StrEnum):
    """What a record tells of."""

    START = "start"  # a start, nothing evicted for it
    SWAP = "swap"  # a start that stopped models, or put them to sleep, first
    STOP = "stop"  # a model drained and stopped (or taken back from its stop)
    SLEEP = "sleep"  # a model drained and put to sleep, its process kept
    WAKE = "wake"  # an asleep model made ready again
    CRASH = "crash"  # a ready or asleep model's process exited on its own


class SwapOutcome(StrEnum):
    """How a record's episode ended (`SwapRecord.result`)."""

    OK = "ok"
    FAILED = "failed"  # the start or the wake failed (`reason` says why)
    ABORTED = "aborted"  # a start or a wake called off (unloaded, reloaded, swapd stopping)


class SwapPhase(StrEnum):
    """A timed phase of an episode (`SwapRecord.phases`), as the daemon's machinery measures it."""

    DRAIN = "drain"  # until no proxy has a request in flight for it
    STOP = "stop"  # its process taken down
    START = "start"  # its process spawned
    HEALTH = "health"  # its health check, until it answered
    SLEEP = "sleep"  # its sleep calls and the check that its GPU memory came back
    WAKE = "wake"  # its wake calls and the health check after them
    # Its `wakeProbe`: asked after a wake (and before its process's first sleep, to record the
    # answer a wake must give again).
    VERIFY = "verify"
    # Its server's conversation caches (llama.cpp's KV slots) saved to files after the drain,
    # before the stop or sleep; and restored after the health check (or wake), before the first
    # request goes through (docs/guides/kv-cache.md).
    KV_SAVE = "kv_save"
    KV_RESTORE = "kv_restore"


class SwapRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One start, swap, stop or crash of a model, once it ended, with how long each phase took.

    `kind` (`SwapKind`): `start` (nothing evicted), `swap` (a start that stopped `evicted`
    first, or put them to sleep; their drain, stop and sleep phases are its own, the longest of
    those run side by side), `stop`, `sleep` (put to sleep, its process kept), `wake` (an asleep
    model made ready again; `evicted` and their phases as a swap's), `crash` (a ready or asleep
    model's process exited on its own). `cause` is a `causes.StartCause` (`request`: a request
    for `model`; `load`: an explicit load, `POST /api/models/load/<id>`, `swapd load`,
    llama.cpp's `POST /models/load`, Ollama's empty generate; `preload`, `adopted`) for a start
    or a swap, a `causes.StopCause` (`swap`: for `for_model`; `unload`, `ttl`, `reload`,
    `shutdown`, `sleep`, `sleep_failed`, `wake_failed`, `wake_unverified`, `asleep_ttl`) for a
    stop or a sleep, and `crash` for a crash. `result` (`SwapOutcome`): `ok`, `failed` (the
    start or wake failed: `reason` says why), `aborted`. `phases` (`SwapPhase` -> seconds):
    `drain`, `stop`, `start`, `health`, `sleep` (the calls and the release check), `wake` (the
    calls and the health check), `verify` (the `wakeProbe` after a wake, or before a first sleep
    to record its answer), `kv_save` and `kv_restore` (the conversation caches saved and
    restored), and in `phase_bytes` (`SwapPhase` -> bytes) what a phase moved (`kv_save`,
    `kv_restore`).

    A start or swap a request asked for also says when that request came (`queued`), how long it
    waited in all (`waited`, seconds to `ended`: far more than the phases when the swap waited
    for a busy model) and what the swap waited for before its phases began (`waited_for`, the
    scheduler's words, in order), and why it was held back once its room was decided
    (`deferred`, `causes.DeferCause`: `unclaimed_ready`, a model it would take out still had
    requests made ready for it on their way to be admitted; absent from the wire when it was
    not held back, so that such records read byte for byte as before). A swap names the stop
    records of its evicted models, whose drain and stop are its own phases (`folded`): one swap,
    not a stop and a swap."""

    id: int
    kind: SwapKind
    model: str
    # A `StartCause` or a `StopCause`, by its value: msgspec decodes no union of two str enums.
    cause: str
    began: float  # wall clock
    ended: float
    result: SwapOutcome = SwapOutcome.OK
    reason: str = ""  # the daemon's own words (the state change's reason)
    phases: dict[SwapPhase, float] = msgspec.field(default_factory=dict)
    evicted: tuple[str, ...] = ()
    for_model: str = ""
    queued: float = 0.0  # wall clock: when the swap was queued (0: not known, or not asked for)
    waited: float = 0.0  # seconds from `queued` to `ended` (0: not known)
    waited_for: tuple[str, ...] = ()
    deferred: tuple[DeferCause, ...] | msgspec.UnsetType = msgspec.UNSET
    folded: tuple[int, ...] = ()  # the ids of the evicted models' stop records
    # Left out of the wire (UNSET) when no phase moved bytes: a record reads as it always did.
    phase_bytes: dict[SwapPhase, int] | msgspec.UnsetType = msgspec.UNSET
