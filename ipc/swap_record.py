"""Swap records: the web UI's timeline (`GET /api/swaps`, `/api/events` type `swap`)."""

from __future__ import annotations

import msgspec

from .causes import DeferCause


class SwapRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One start, swap, stop or crash of a model, once it ended, with how long each phase took.

    `kind`: `start` (nothing evicted), `swap` (a start that stopped `evicted` first, or put them
    to sleep; their drain, stop and sleep phases are its own, the longest of those run side by
    side), `stop`, `sleep` (put to sleep, its process kept), `wake` (an asleep model made ready
    again; `evicted` and their phases as a swap's), `crash` (a ready or asleep model's process
    exited on its own). `cause` is a `causes.StartCause` (`request`: a request
    for `model`; `load`: an explicit load, `POST /api/models/load/<id>`, `swapd load`,
    llama.cpp's `POST /models/load`, Ollama's empty generate; `preload`, `adopted`) for a start
    or a swap, a `causes.StopCause` (`swap`: for `for_model`; `unload`, `ttl`, `reload`,
    `shutdown`, `sleep`, `sleep_failed`, `wake_failed`, `asleep_ttl`) for a stop or a sleep, and
    `crash` for a crash. `result`: `ok`, `failed` (the start or wake failed: `reason` says why),
    `aborted`. `phases`: seconds of `drain`, `stop`, `start`, `health`, `sleep` (the calls and
    the release check), `wake` (the calls and the health check).

    A start or swap a request asked for also says when that request came (`queued`), how long it
    waited in all (`waited`, seconds to `ended`: far more than the phases when the swap waited
    for a busy model) and what the swap waited for before its phases began (`waited_for`, the
    scheduler's words, in order), and why it was held back once its room was decided
    (`deferred`, `causes.DeferCause`: `unclaimed_ready`, a model it would take out still had
    requests made ready for it on their way to be admitted). A swap names the stop records of
    its evicted models, whose drain and stop are its own phases (`folded`): one swap, not a stop
    and a swap."""

    id: int
    kind: str
    model: str
    cause: str
    began: float  # wall clock
    ended: float
    result: str = "ok"
    reason: str = ""  # the daemon's own words (the state change's reason)
    phases: dict[str, float] = msgspec.field(default_factory=dict)
    evicted: tuple[str, ...] = ()
    for_model: str = ""
    queued: float = 0.0  # wall clock: when the swap was queued (0: not known, or not asked for)
    waited: float = 0.0  # seconds from `queued` to `ended` (0: not known)
    waited_for: tuple[str, ...] = ()
    deferred: tuple[DeferCause, ...] = ()
    folded: tuple[int, ...] = ()  # the ids of the evicted models' stop records
