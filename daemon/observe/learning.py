"""The daemon's learning of the traffic (`learn`, docs/swapping.md "Learning the traffic"): the
activity log's requests feed `Traffic`; the asleep-or-stop rule reads it (`back_chance`,
`roomy`); the likely next model's weight files are read ahead into the page cache while the
current one runs; and each model's files are measured in the page cache for its status.

Read-ahead is one model at a time, in a thread, and only when its files fit in half of
MemAvailable; a model is not read ahead again within REPREFETCH seconds. The page cache
is sampled every SAMPLE_EVERY seconds, in a thread."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable

from ...ipc.activity import ActivityRecord
from ...ipc.model_status import Follower, Learned, PageCache
from ...ipc.states import ModelState
from ..config import Config
from . import page_cache
from .traffic import Traffic

log = logging.getLogger("swapd.daemon")

SAMPLE_EVERY = 5.0
REPREFETCH = 60.0
# The share of MemTotal that must be available for learning to keep a model asleep longer.
ROOMY_SHARE = 0.2
# A model in one of these states has nothing to gain from a read-ahead.
_LOADED = {
    ModelState.STARTING,
    ModelState.READY,
    ModelState.ASLEEP,
    ModelState.SLEEPING,
    ModelState.WAKING,
}


class Learning:
    def __init__(
        self,
        config: Config,
        state_of: Callable[[str], ModelState | None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.state_of = state_of
        self.clock = clock
        self.traffic = Traffic()
        self.files: dict[str, list[str]] = {}
        self.cached: dict[str, PageCache] = {}
        self.prefetched: dict[str, tuple[float, int]] = {}  # model -> (when, bytes asked)
        self._reading: threading.Thread | None = None
        self.memory: Callable[[], tuple[int, int]] = page_cache.memory

    @property
    def enabled(self) -> bool:
        return self.config.learn

    def reconfigure(self, config: Config) -> None:
        self.config = config
        if not config.learn:
            self.traffic.forget()
        gone = [m for m in list(self.cached) if m not in config.models]
        for model in gone:
            del self.cached[model]

    def records(self, records: Iterable[ActivityRecord], prefetch: bool = True) -> None:
        """Requests the activity log took in: learned, and the likely next model read ahead
        (`prefetch`: False for the history kept from before a restart, `store.path`)."""
        if not self.config.learn:
            return
        models = self.config.models
        seen = sorted(
            (r.timestamp, r.model) for r in records if r.model in models and r.model != ""
        )
        for at, model in seen:
            self.traffic.seen(model, at)
        if seen and prefetch and self.config.learn_prefetch:
            self.prefetch_after(seen[-1][1])

    def prefetch_after(self, model: str) -> str | None:
        """Reads ahead the files of the model likely to follow `model`, if there is one and it
        is worth it; the model read ahead, or None."""
        now = self.clock()
        likely = self.traffic.likely_next(model, now)
        if likely is None or self.state_of(likely.model) in _LOADED:
            return None
        when, _ = self.prefetched.get(likely.model, (0.0, 0))
        if now - when < REPREFETCH or (self._reading is not None and self._reading.is_alive()):
            return None
        target = self.config.models.get(likely.model)
        if target is None:
            return None
        self.prefetched[likely.model] = (now, 0)
        thread = threading.Thread(
            target=self._read_ahead,
            args=(likely.model, target.cmd, target.weights),
            name=f"swapd-prefetch-{likely.model}",
            daemon=True,
        )
        self._reading = thread
        thread.start()
        return likely.model

    def _read_ahead(self, model: str, cmd: tuple[str, ...], weights: tuple[str, ...]) -> None:
        try:
            files = page_cache.weight_files(cmd, weights)
            size = sum(page_cache.sizes(files))
            available, _ = self.memory()
            if not files or size > available // 2:
                log.info("%s: not read ahead (%d bytes, %d available)", model, size, available)
                return
            asked = page_cache.read_ahead(files)
            self.prefetched[model] = (self.clock(), asked)
            log.info("%s: read ahead into the page cache, likely next (%d bytes)", model, asked)
        except Exception:
            log.exception("%s: read-ahead failed", model)

    def back_chance(self, model: str, idle: float, within: float, now: float) -> float | None:
        if not self.config.learn:
            return None
        return self.traffic.back_chance(model, idle, within, now)

    def roomy(self) -> bool:
        available, total = self.memory()
        return total > 0 and available >= ROOMY_SHARE * total

    def sample(self) -> list[str]:
        """Measures each model's files in the page cache (blocking: run in a thread); the
        models whose figures changed."""
        changed = []
        now = self.clock()
        for model_id, model in list(self.config.models.items()):
            files = page_cache.weight_files(model.cmd, model.weights)
            self.files[model_id] = files
            if not files:
                if self.cached.pop(model_id, None) is not None:
                    changed.append(model_id)
                continue
            held = page_cache.residency(files)
            before = self.cached.get(model_id)
            fraction = held.cached / held.size if held.size else 0.0
            self.cached[model_id] = PageCache(held.files, held.size, held.cached, fraction, now)
            if before is None or (before.cached, before.size) != (held.cached, held.size):
                changed.append(model_id)
        return changed

    async def run(self, changed: Callable[[str], None]) -> None:
        """Samples the page cache for ever; `changed` is told each model whose figures moved."""
        while True:
            try:
                for model in await asyncio.to_thread(self.sample):
                    changed(model)
            except Exception:
                log.exception("page cache sampling failed")
            await asyncio.sleep(SAMPLE_EVERY)

    def learned(self, model: str, idle: float | None, within: float) -> Learned | None:
        """What is learned of `model` for its status (None: learning is off); `idle`: seconds it
        has been asleep and unused (None: not asleep)."""
        if not self.config.learn:
            return None
        now = self.clock()
        likely = self.traffic.likely_next(model, now)
        when, asked = self.prefetched.get(model, (0.0, 0))
        chance = None
        if idle is not None and within > 0:
            chance = self.traffic.back_chance(model, idle, within, now)
        return Learned(
            followers=tuple(
                Follower(f.model, round(f.count, 3), round(f.share, 3), round(f.median_gap, 3))
                for f in self.traffic.followers(model, now)
            ),
            likely_next=likely.model if likely is not None else "",
            returns=tuple(round(gap, 3) for gap, _ in self.traffic.returns(model, now)),
            back_chance=chance,
            prefetched_at=when if asked else 0.0,
            prefetched_bytes=asked,
        )
