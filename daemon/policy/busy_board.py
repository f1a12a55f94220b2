"""Busy means busy: what each model's `busyCheck` last found, and which swaps it holds back.

* The board keeps the last reading of every ready model with a check. A busy model's TTL does not
  run out (`held` is infinite); when it turns idle the clock restarts from then (`held` is that
  time). A failed check counts as idle and is logged once, until the check answers again.
* A swap whose eviction policy waits for a busy model (`policy/eviction/preemption.py`) is shown
  on that model (`hold`, `release`), with when it goes ahead at the latest, so that `swapd status`
  and the web UI say why a swap waits. Only swaps wait; an unload, a reload and a shutdown do not.

No I/O here: readings come in through `observe`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ...ipc.model_status import Busy
from ..config import Config
from . import ttl
from .busy_answer import Reading
from .eviction.contract import Hold
from .proxies import ProxyRegistry
from .records import H, ModelRecord

log = logging.getLogger("swapd.busy")


@dataclass
class _Entry:
    reading: Reading
    since: float  # wall: when the current busy, idle or failing spell began
    idle_since: float = 0.0  # wall: when it last turned idle after being busy (0: never busy)
    checked_at: float = 0.0
    ttl_noted: bool = False  # the log said, in this busy spell, that the TTL waits
    holding: dict[str, float] = field(default_factory=dict)  # swap target -> wall deadline


def _shown(entry: _Entry | None) -> tuple[object, ...]:
    if entry is None:
        return ()
    r = entry.reading
    return (r.jobs, r.parts, r.error, tuple(sorted(entry.holding)))


class BusyBoard:
    def __init__(
        self,
        on_change: Callable[[str], None] | None = None,
        *,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.on_change = on_change
        self.wall = wall
        self._entries: dict[str, _Entry] = {}
        # By swap target: the busy models it waits for (its policy's `Wait.holding`).
        self._waits: dict[str, dict[str, Hold]] = {}

    # ------------------------------------------------------------------------- readings

    def observe(self, model_id: str, reading: Reading) -> None:
        now = self.wall()
        entry = self._entries.get(model_id)
        before = _shown(entry)
        if entry is None:
            entry = self._entries[model_id] = _Entry(reading, since=now)
            was = Reading()
            if reading.busy:
                log.info("%s: busy (%s)", model_id, reading.words())
        else:
            was, entry.reading = entry.reading, reading
            self._log_turn(model_id, entry, was, reading, now)
        if reading.error and not was.error:
            log.warning(
                "%s: busy check failed (%s); counted as idle until it answers again",
                model_id,
                reading.error,
            )
        elif was.error and not reading.error:
            log.info("%s: busy check answers again (%s)", model_id, reading.words())
        entry.checked_at = now
        if _shown(entry) != before:
            self._changed(model_id)

    def _log_turn(
        self, model_id: str, entry: _Entry, was: Reading, reading: Reading, now: float
    ) -> None:
        if reading.busy and not was.busy:
            entry.since = now
            log.info("%s: busy (%s)", model_id, reading.words())
        elif was.busy and not reading.busy:
            busy_for = now - entry.since
            entry.since = entry.idle_since = now
            restarts = "; its TTL counts from now" if entry.ttl_noted else ""
            entry.ttl_noted = False
            said = f"busy check failed: {reading.error}" if reading.error else reading.words()
            log.info("%s: idle after %.0fs busy (%s)%s", model_id, busy_for, said, restarts)
        elif bool(was.error) != bool(reading.error):
            entry.since = now

    def forget(self, model_id: str) -> None:
        """The model is no longer ready: no reading, nothing held."""
        if self._entries.pop(model_id, None) is not None:
            self._changed(model_id)

    def _changed(self, model_id: str) -> None:
        if self.on_change is not None:
            self.on_change(model_id)

    # ---------------------------------------------------------------------------- views

    def busy(self, model_id: str) -> bool:
        entry = self._entries.get(model_id)
        return entry is not None and entry.reading.busy

    def words(self, model_id: str) -> str:
        entry = self._entries.get(model_id)
        return entry.reading.words() if entry is not None else "no reading"

    def held(self, model_id: str) -> float:
        """For the TTL: infinite while busy, else when it last turned idle (0.0: never busy)."""
        entry = self._entries.get(model_id)
        if entry is None:
            return 0.0
        return math.inf if entry.reading.busy else entry.idle_since

    def report(self, model_id: str) -> Busy | None:
        entry = self._entries.get(model_id)
        if entry is None:
            return None
        r = entry.reading
        if r.error:
            message = f"idle (busy check failed: {r.error}; counted as idle)"
        elif r.busy:
            message = f"busy ({r.words()})"
        else:
            message = "idle"
        holding = tuple(sorted(entry.holding))
        if holding:
            # A time, not a countdown: the message is published once and read later.
            until = time.strftime("%H:%M:%S", time.localtime(max(entry.holding.values())))
            message += f"; a swap to {', '.join(holding)} waits for it (until {until} at most)"
        return Busy(
            busy=r.busy,
            jobs=r.jobs if r.busy else 0,
            message=message,
            words=r.words(),
            since=entry.since,
            checked_at=entry.checked_at,
            error=r.error,
            holding=holding,
            hold_until=max(entry.holding.values(), default=0.0),
        )

    def holding_for(self, target: str) -> dict[str, float]:
        """The busy models the swap to `target` waits for, each with when (wall clock) the swap
        goes ahead anyway at the latest."""
        return {m: e.holding[target] for m, e in self._entries.items() if target in e.holding}

    # ------------------------------------------------------------------------------ TTL

    def note_ttl(
        self, records: Iterable[ModelRecord[H]], config: Config, registry: ProxyRegistry
    ) -> None:
        """Log once per busy spell that a model's TTL ran out but it stays, being busy."""
        for rec in records:
            entry = self._entries.get(rec.id)
            if entry is None or entry.ttl_noted or not entry.reading.busy:
                continue
            model = config.models.get(rec.id)
            if ttl.ttl_left_of(rec, model, registry, held=entry.idle_since) == 0.0:
                entry.ttl_noted = True
                assert model is not None
                log.info(
                    "%s: TTL of %ss reached, but it stays loaded: busy (%s); the TTL counts "
                    "again once it is idle",
                    rec.id,
                    model.ttl,
                    entry.reading.words(),
                )

    # ---------------------------------------------------------------------------- holds

    def waits(self, target: str, holding: Mapping[str, Hold]) -> None:
        """The busy models the swap to `target` waits for now (its eviction policy's last
        decision): shown on each (`Busy.holding`, with when the swap goes ahead at the latest),
        logged as each wait begins and as it ends."""
        before = self._waits.pop(target, {})
        if holding:
            self._waits[target] = dict(holding)
        for model_id, hold in holding.items():
            if model_id in before:
                continue
            log.info(
                "%s: busy (%s); the swap to %s waits until it is idle, at most %gs",
                model_id,
                self.words(model_id),
                target,
                hold.at_most,
            )
            self._hold(model_id, target, self.wall() + hold.until - time.monotonic())
        for model_id, hold in before.items():
            if model_id in holding:
                continue
            self._release(model_id, target)
            if self.busy(model_id):
                log.warning(
                    "%s: still busy (%s) after %gs; the swap to %s goes ahead (swapWait)",
                    model_id,
                    self.words(model_id),
                    hold.at_most,
                    target,
                )
            else:
                log.info("%s: idle; the swap to %s goes ahead", model_id, target)

    def waits_over(self, target: str) -> None:
        """The swap to `target` ended (or was answered otherwise): it waits for nothing."""
        for model_id in self._waits.pop(target, {}):
            self._release(model_id, target)

    def _hold(self, model_id: str, target: str, until: float) -> None:
        entry = self._entries.get(model_id)
        if entry is not None and entry.holding.get(target) != until:
            entry.holding[target] = until
            self._changed(model_id)

    def _release(self, model_id: str, target: str) -> None:
        entry = self._entries.get(model_id)
        if entry is not None and entry.holding.pop(target, None) is not None:
            self._changed(model_id)
