"""A model's swap story as the scheduler tells it, as it happens (`Effects.happened`): an
episode began, a phase of it was done, it ended. The daemon's swap log (`observe/swap_log.py`)
keeps each episode as a `SwapRecord` once it ended; it infers nothing from the models' states.

The episodes, and who tells what (`starts.py`, `stops.py`, `deciding.py`):

* a start: `Began(START)` as the model goes `starting` (`adopted`: a process found starting);
  `Ended` OK once ready, FAILED with the start's error, ABORTED when an unload, a reload or a
  shutdown called it off (or an adopted process never became healthy);
* a wake: `Began(WAKE)` as the model goes `waking`; `Ended` OK once ready, FAILED when the wake
  failed (a take-down and a cold start follow, episodes of their own), ABORTED as a start;
* a take-down: `Began(STOP)` with its cause as the model is drained (or, asleep, stopped);
  `Ended` OK with what it came to, `STOP` once stopped or `SLEEP` once asleep (a sleep that fails
  comes to a stop); with none when a request took the model back from its drain;
* a crash: `Began(CRASH)` and `Ended` OK, as the scheduler learns that a ready or asleep model's
  process exited on its own;
* a swap held back: `Deferred` with its typed cause, while the swap to the model waits, its room
  decided (`deciding.py`, step 11), before that model's start begins.

`PhaseDone` comes from the daemon's machinery, which times the phases (drain, stop, start,
health, sleep, wake), in the episode it belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ipc.causes import DeferCause, StopCause
from ...ipc.swap_record import SwapKind, SwapOutcome, SwapPhase


@dataclass(frozen=True)
class Began:
    """An episode of `model` began: a START, a WAKE, a take-down (STOP, whatever it comes to)
    or a CRASH."""

    model: str
    kind: SwapKind
    cause: StopCause | None = None  # a take-down's, a crash's (a start's is the daemon's hint)
    for_model: str = ""  # a take-down for a swap: the model it makes room for
    adopted: bool = False  # a start: of a process this daemon found starting


@dataclass(frozen=True)
class PhaseDone:
    """A phase of `model`'s episode under way took `seconds` (and moved `bytes`: a KV save or
    restore)."""

    model: str
    phase: SwapPhase
    seconds: float
    bytes: int = 0


@dataclass(frozen=True)
class Ended:
    """`model`'s episode ended, with its `outcome` and the daemon's words for it."""

    model: str
    outcome: SwapOutcome
    reason: str = ""
    # What a take-down came to: STOP (stopped) or SLEEP (asleep); None when a request took its
    # model back (it stays a stop of its own, folded into no swap), and for any other episode.
    came_to: SwapKind | None = None


@dataclass(frozen=True)
class Deferred:
    """The swap to `model`, its room decided, was held back all the same, for `cause` (told
    before its start's episode begins: that start's record keeps it)."""

    model: str
    cause: DeferCause


Happening = Began | PhaseDone | Ended | Deferred
