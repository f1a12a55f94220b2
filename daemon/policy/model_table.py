"""Every model's lifecycle record, and the one way a model's state changes: logged, and told to
the effects (which publish it)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Generic

from ...ipc.states import LOADED_STATES, ModelState
from ..config import Config
from .records import Effects, H, ModelRecord, Stop

log = logging.getLogger("swapd.scheduler")


class ModelTable(Generic[H]):
    def __init__(self, config: Config, effects: Effects[H]) -> None:
        self.config = config
        self.effects = effects
        self.records: dict[str, ModelRecord[H]] = {}

    def record(self, model_id: str) -> ModelRecord[H]:
        rec = self.records.get(model_id)
        if rec is None:
            rec = self.records[model_id] = ModelRecord(model_id)
        return rec

    def set(
        self, rec: ModelRecord[H], state: ModelState, reason: str = "", stop: Stop | None = None
    ) -> None:
        """`rec` is in `state` now; `reason` is what a person reads (for a stop, rendered from
        `stop`, which says why)."""
        if rec.state == state and rec.reason == reason:
            return
        log.info("%s: %s -> %s%s", rec.id, rec.state, state, f" ({reason})" if reason else "")
        rec.state = state
        rec.reason = reason
        rec.stop = stop
        rec.since = time.time()
        self.effects.changed(rec, self.config.models.get(rec.id))

    def loaded(self) -> frozenset[str]:
        return frozenset(r.id for r in self.records.values() if r.state in LOADED_STATES)

    def configure(self, config: Config) -> None:
        """Switch to `config`: the records of models it removed are dropped once not loaded."""
        self.config = config
        for mid in list(self.records):
            if mid not in config.models and self.records[mid].state not in LOADED_STATES:
                del self.records[mid]

    def states(self) -> Iterator[ModelRecord[H]]:
        """Every configured model's record (in the config's order), then the others still
        loaded (a reload removed them)."""
        known = set(self.config.models)
        for mid in self.config.models:
            yield self.record(mid)
        for mid, rec in list(self.records.items()):
            if mid not in known:
                yield rec
