"""Keep an asleep model asleep or stop it, by what was learned of its returns (docs/swapping.md,
"Learning the traffic"). With `stopAfter` S and the model unused for `idle` seconds, `chance`
is the learned chance that it is asked for within S more (`observe/traffic.Traffic.back_chance`;
None: too little learned):

- nothing learned (or learning off): stopped at S, as without learning;
- before S/2: never stopped;
- from S/2 to S: stopped sooner when the chance is below LOW (it is hardly ever asked back after
  a pause this long);
- from S to 4 S: kept asleep while the chance is at least HIGH and the host has memory to spare
  (`roomy`), else stopped;
- at 4 S: stopped, whatever was learned."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

LOW = 0.1
HIGH = 0.5
LONGEST = 4.0  # times stopAfter: the longest an asleep model is kept by learning


class Learned(Protocol):
    """What the rule reads of the learning (`observe/learning.Learning`)."""

    def back_chance(self, model: str, idle: float, within: float, now: float) -> float | None: ...

    def roomy(self) -> bool: ...


def stop_left(
    idle: float, stop_after: float, chance: Callable[[float], float | None], roomy: bool
) -> float:
    """Seconds until the model is stopped, as far as is known now (0: stop it now); `chance`
    takes the seconds it has been unused."""
    idle = max(0.0, idle)
    if stop_after <= 0:
        raise ValueError("stop_after must be positive")
    odds = chance(idle)
    if odds is None:
        return max(0.0, stop_after - idle)
    if idle < stop_after / 2:
        return stop_after - idle
    if idle < stop_after:
        return 0.0 if odds < LOW else stop_after - idle
    if idle < LONGEST * stop_after and odds >= HIGH and roomy:
        return LONGEST * stop_after - idle
    return 0.0
