"""What swapd learns of the traffic from the requests it records (the activity records): which
model tends to follow which and after how long, and how soon a model is asked for again after a
pause. Counts decay with a half-life, so yesterday's habits fade; memory is bounded (models kept,
followers per model, gaps per pair). Pure: times are handed in.

A request for `b` right after one for `a` (no request for another model between them) counts one
`a -> b`, with the gap between `a`'s last request and `b`'s first. A request for a model that
comes `PAUSE` seconds or more after its previous one counts a return, with that gap: what the
asleep-or-stop rule (`policy/keep_asleep.py`) reads."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

HALF_LIFE = 6 * 3600.0  # seconds for a count to weigh half
PAUSE = 10.0  # a gap at least this long between two requests for a model is a return
MAX_MODELS = 64
MAX_FOLLOWERS = 8
GAPS_KEPT = 16
# A model's likely successor: followed it at least this often (decayed), this share of times.
LIKELY_COUNT = 1.5
LIKELY_SHARE = 0.5
# Fewer returns kept than this: nothing is said of a model's returns.
MIN_RETURNS = 3


def _decayed(weight: float, since: float, now: float, half_life: float) -> float:
    return weight * 0.5 ** (max(0.0, now - since) / half_life)


@dataclass
class _Follow:
    weight: float = 0.0
    at: float = 0.0  # when `weight` was last brought up to date
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=GAPS_KEPT))


@dataclass
class _Model:
    last: float = 0.0  # its last request
    follows: dict[str, _Follow] = field(default_factory=dict)
    # (gap, when it was seen): its returns after a pause, newest last.
    returns: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=GAPS_KEPT))


@dataclass(frozen=True)
class Follower:
    model: str
    count: float  # decayed
    share: float  # of all that followed
    median_gap: float  # seconds


class Traffic:
    def __init__(self, half_life: float = HALF_LIFE, pause: float = PAUSE) -> None:
        self.half_life = half_life
        self.pause = pause
        self.models: dict[str, _Model] = {}
        self.previous: str | None = None  # the model of the last request seen

    def seen(self, model: str, at: float) -> None:
        """A request for `model` at wall-clock `at` (seen in order of time, mostly)."""
        entry = self.models.get(model)
        if entry is not None and at - entry.last >= self.pause:
            entry.returns.append((at - entry.last, at))
        prev = self.previous
        if prev is not None and prev != model and prev in self.models:
            before = self.models[prev]
            follow = before.follows.get(model)
            if follow is None:
                follow = before.follows[model] = _Follow(at=at)
            follow.weight = _decayed(follow.weight, follow.at, at, self.half_life) + 1.0
            follow.at = at
            follow.gaps.append(max(0.0, at - before.last))
            self._bound_followers(before, model, at)
        if entry is None:
            entry = self.models[model] = _Model()
            self._bound_models()
        entry.last = max(entry.last, at)
        self.previous = model

    def forget(self) -> None:
        self.models.clear()
        self.previous = None

    def followers(self, model: str, now: float) -> list[Follower]:
        """Who followed `model`, most often first."""
        entry = self.models.get(model)
        if entry is None:
            return []
        weights = {
            name: _decayed(f.weight, f.at, now, self.half_life) for name, f in entry.follows.items()
        }
        total = sum(weights.values())
        out = [
            Follower(name, weights[name], weights[name] / total, statistics.median(f.gaps))
            for name, f in entry.follows.items()
            if total > 0 and f.gaps
        ]
        return sorted(out, key=lambda f: (-f.count, f.model))

    def likely_next(self, model: str, now: float) -> Follower | None:
        """The model that usually follows `model`, if one does (LIKELY_COUNT, LIKELY_SHARE)."""
        ranked = self.followers(model, now)
        if ranked and ranked[0].count >= LIKELY_COUNT and ranked[0].share >= LIKELY_SHARE:
            return ranked[0]
        return None

    def returns(self, model: str, now: float) -> list[tuple[float, float]]:
        """(gap, decayed weight) of each return of `model` kept."""
        entry = self.models.get(model)
        if entry is None:
            return []
        return [(gap, _decayed(1.0, at, now, self.half_life)) for gap, at in entry.returns]

    def back_chance(self, model: str, idle: float, within: float, now: float) -> float | None:
        """The learned chance that `model`, unused for `idle` seconds, is asked for within
        `within` more: of its returns that came later than `idle`, the (decayed) share that came
        by `idle + within`, counting the present pause as one that may never return. None: fewer
        than MIN_RETURNS returns kept."""
        kept = self.returns(model, now)
        if len(kept) < MIN_RETURNS:
            return None
        later = sum(w for gap, w in kept if gap > idle)
        soon = sum(w for gap, w in kept if idle < gap <= idle + within)
        return soon / (later + 1.0)

    def _bound_followers(self, entry: _Model, newest: str, now: float) -> None:
        def weight(name: str) -> float:
            follow = entry.follows[name]
            return _decayed(follow.weight, follow.at, now, self.half_life)

        while len(entry.follows) > MAX_FOLLOWERS:
            # The one just seen stays: a new habit must be able to start.
            del entry.follows[min((n for n in entry.follows if n != newest), key=weight)]

    def _bound_models(self) -> None:
        while len(self.models) > MAX_MODELS:
            stalest = min(self.models, key=lambda n: self.models[n].last)
            del self.models[stalest]
            if self.previous == stalest:
                self.previous = None
