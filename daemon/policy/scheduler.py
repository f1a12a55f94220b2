"""The scheduler: for each `ensure`, serve now, join a start, queue, or start a swap.

Plain logic over an `Effects` object (the process machinery, the drain protocol, the eviction
policy and the event publisher in the daemon; a fake in the unit tests). It owns every model's
lifecycle state: stopped -> starting -> ready -> draining -> stopping -> stopped, plus failed.

Rules (llama-swap's FIFO scheduler, adapted to the two-phase drain):
* a ready model that no swap is evicting is served at once;
* collation (docs/swapping.md): for COLLATE_WINDOW after it was queued, a swap waits for busy
  models it must stop to go idle, and a request for a model it is draining takes that model back;
* queued swaps that conflict begin in priority order, arrival order within a priority;
* one start per model: concurrent ensures of a model join the same swap task;
* a swap evicts what the eviction policy names, draining and stopping them in parallel, then starts
  its target; swaps whose evict sets touch each other (or each other's targets) wait their turn,
  disjoint ones run side by side;
* a model being drained or stopped is started again only after its stop finished;
* an unload answers every ensure already waiting for that model with 503 `model_unloaded` (a start
  under way is aborted and its process stopped); ensures that arrive after it wait for the stop and
  start the model again;
* a reload that changes the definition of a model being started aborts that start and starts the
  new definition for the same waiters;
* after BACKOFF_AFTER failed starts in a row, a model is not tried again before a growing delay,
  and ensures say so (503) instead of looping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable

from ..config import Config, ModelConfig
from ..errors import EnsureError, ModelNotFound, ModelUnloaded, ShuttingDown
from .records import LOADED_STATES, H, ModelRecord, Swap, retrieve
from .swaps import BACKOFF_AFTER, BACKOFF_BASE, BACKOFF_MAX, SwapEngine

__all__ = [
    "BACKOFF_AFTER",
    "BACKOFF_BASE",
    "BACKOFF_MAX",
    "EnsureError",
    "ModelRecord",
    "Scheduler",
]

log = logging.getLogger("swapd.scheduler")


class Scheduler(SwapEngine[H]):
    # ------------------------------------------------------------------------------- stop

    async def stop(self, model_id: str, reason: str, *, collatable: bool = False) -> None:
        """Drain and stop one model (joins a stop already under way); no-op when not loaded.
        `collatable`: a swap stops it, so a request for it may still take it back while it
        drains (collation)."""
        existing = self._stops.get(model_id)
        if existing is not None:
            if not collatable:
                # An unload, a TTL or a reload wants it stopped too: no request takes it back.
                self._collatable.discard(model_id)
            await asyncio.shield(existing)
            return
        rec = self.record(model_id)
        if rec.state == "starting":
            swap = self._swaps.get(model_id)
            if swap is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(swap.task)
            return await self.stop(model_id, reason)
        if rec.state not in LOADED_STATES or rec.handle is None:
            return
        task = asyncio.get_running_loop().create_task(self._stop(rec, reason))
        self._stops[model_id] = task
        if collatable:
            self._collatable.add(model_id)
        await asyncio.shield(task)

    async def _stop(self, rec: ModelRecord[H], reason: str) -> None:
        try:
            if rec.state == "ready":
                self._set(rec, "draining", reason)
                drain = asyncio.get_running_loop().create_task(self.effects.drain(rec.id))
                self._draining[rec.id] = drain
                try:
                    await asyncio.wait([drain])
                finally:
                    if self._draining.get(rec.id) is drain:
                        del self._draining[rec.id]
                    if not drain.done():
                        drain.cancel()  # this stop was cancelled itself
                if drain.cancelled() or self._stops.get(rec.id) is not asyncio.current_task():
                    return  # collation took the model back (`_collate` set it ready)
                drain.result()
            self._collatable.discard(rec.id)
            self._set(rec, "stopping", reason)
            handle = rec.handle
            assert handle is not None
            # A swap stopping this model starts its own target right after.
            follows = self._start_follows(rec.id)
            try:
                await self.effects.stop(rec.id, handle, rec.model, start_follows=follows)
            except Exception:
                log.exception("%s: stop failed", rec.id)
            rec.handle = None
            self._set(rec, "stopped", reason)
        finally:
            if self._stops.get(rec.id) is asyncio.current_task():
                del self._stops[rec.id]
                self._collatable.discard(rec.id)
            await self._wake()

    async def unload(self, model_id: str | None, reason: str = "unloaded") -> list[str]:
        """Stop one model (id or alias) or, with None, every loaded one. Returns the ids stopped.

        Ensures already waiting for a model when its unload arrives get 503 `model_unloaded` (a
        start under way is aborted); ensures that arrive later wait until it stopped, then start
        it again."""
        if model_id is None:
            targets = sorted(self.loaded() | self._swaps.keys())
        else:
            model = self.config.resolve(model_id)
            mid = model.id if model is not None else model_id
            if model is None and mid not in self.records:
                raise ModelNotFound(f"no local model {model_id!r}")
            targets = [mid]
        await asyncio.gather(*(self._unload(m, reason) for m in targets))
        return targets

    async def _unload(self, model_id: str, reason: str) -> None:
        self._unloading[model_id] += 1
        try:
            swap = self._swaps.pop(model_id, None)
            if swap is not None:
                self._abort(
                    swap,
                    ModelUnloaded(
                        f"model {model_id} was unloaded while this request waited for it; "
                        "send the request again to start it again",
                    ),
                    reason,
                )
                assert swap.task is not None
                await asyncio.wait([swap.task])
            await self.stop(model_id, reason)
        finally:
            self._unloading[model_id] -= 1
            if self._unloading[model_id] <= 0:
                del self._unloading[model_id]
            await self._wake()

    # ----------------------------------------------------------------- outside events

    def adopt(self, model: ModelConfig, handle: H) -> None:
        """A process that already runs (found in circusd after a daemon restart) is ready."""
        rec = self.record(model.id)
        rec.handle = handle
        rec.model = model
        self._set(rec, "ready", "adopted")

    def adopt_when_healthy(
        self, model: ModelConfig, waiting: Coroutine[object, object, H | None]
    ) -> None:
        """A process found starting (the previous daemon died mid-start). Ensures join it as they
        join a start; `waiting` returns its handle once healthy, or None when it did not become
        healthy (then the same swap starts the model afresh). Cancelling `waiting` must stop it."""
        loop = asyncio.get_running_loop()
        swap = self._swaps[model.id] = Swap(model.id, loop.create_future())
        swap.result.add_done_callback(retrieve)
        swap.claimed = True  # its model counts as running for other swaps meanwhile
        swap.task = loop.create_task(self._run_swap(swap, waiting))

    def process_exited(self, model_id: str, pid: int, exit_code: int | None) -> bool:
        """A ready model's process died on its own. Returns True when it was one of ours.

        Its state becomes `stopped` (the next request starts it again); the leftover watcher is
        cleaned up like a stop, and a new start of the model waits for that.
        """
        rec = self.records.get(model_id)
        if rec is None or rec.handle is None or rec.handle.pid != pid:
            return False
        if rec.state != "ready" or model_id in self._stops or self.shutting_down:
            return False
        said = f"exit code {exit_code}" if exit_code is not None else "unknown exit code"
        reason = f"process {pid} exited on its own ({said})"
        log.warning("%s: %s", model_id, reason)
        handle, model = rec.handle, rec.model
        rec.handle = None
        self._set(rec, "stopped", reason)

        async def cleanup() -> None:
            try:
                await self.effects.stop(model_id, handle, model, start_follows=False)
            except Exception:
                log.exception("%s: cleanup after exit failed", model_id)
            finally:
                self._stops.pop(model_id, None)
                await self._wake()

        self._stops[model_id] = asyncio.get_running_loop().create_task(cleanup())
        return True

    async def shutdown(self) -> None:
        """Refuse new ensures; waiting ones get 503 at once. Starts under way go on (the next
        daemon adopts them) unless `abort_starts` stops them."""
        self.shutting_down = True
        error = ShuttingDown()
        for swap in list(self._swaps.values()):
            self._abort(swap, error, "swapd is shutting down", cancel_start=False)
        await self._wake()

    def stops_under_way(self) -> list[asyncio.Task[None]]:
        """The stops running now (unloads, and cleanups after a process exited on its own)."""
        return list(self._stops.values())

    def tasks(self) -> list[asyncio.Task[None]]:
        """The swaps and stops under way (for the daemon to cancel as it exits)."""
        swaps = [s.task for s in self._swaps.values() if s.task is not None]
        return [*swaps, *self._stops.values()]

    async def abort_starts(self) -> list[str]:
        """Cancel every start under way and wait until each stopped what it had started."""
        swaps = [s for s in self._swaps.values() if s.starting is not None]
        for swap in swaps:
            self._abort(swap, ShuttingDown(), "swapd is shutting down")
        tasks = [s.task for s in swaps if s.task is not None]
        if tasks:
            await asyncio.wait(tasks)
        return [s.target for s in swaps]

    async def reconfigure(
        self, config: Config, stop: Iterable[str], outdated: Callable[[ModelConfig], bool]
    ) -> list[str]:
        """Switch to `config`. Models in `stop` (loaded with a definition that changed) are drained
        and stopped; a start whose definition is `outdated` is aborted and its swap starts the new
        definition for the same waiters (or answers 404 when the model is gone). Returns the ids
        whose start was aborted."""
        self.replace_config(config)
        restarted = []
        for swap in self._swaps.values():
            if swap.model is not None and swap.failed is None and outdated(swap.model):
                swap.restart = True
                if swap.starting is not None:
                    swap.starting.cancel()
                restarted.append(swap.target)
        await asyncio.gather(*(self.stop(m, "config changed") for m in stop))
        return restarted

    def replace_config(self, config: Config) -> None:
        self.config = config
        for mid in list(self.records):
            rec = self.records[mid]
            if mid not in config.models and rec.state not in LOADED_STATES:
                del self.records[mid]

    def states(self) -> Iterable[ModelRecord[H]]:
        known = set(self.config.models)
        for mid in self.config.models:
            yield self.record(mid)
        for mid, rec in list(self.records.items()):
            if mid not in known:
                yield rec
