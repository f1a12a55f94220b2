"""The scheduler: for each `ensure`, serve now, join a start, queue, or start a swap.

Plain logic over an `Effects` object (the process machinery, the drain protocol, the eviction
policy and the event publisher in the daemon; a fake in the unit tests). It owns every model's
lifecycle state: stopped -> starting -> ready -> draining -> stopping -> stopped, plus failed.

Rules (llama-swap's FIFO scheduler, adapted to the two-phase drain):
* a ready model that no swap is evicting is served at once;
* one start per model: concurrent ensures of a model join the same swap task;
* a swap evicts what the eviction policy names, draining and stopping them in parallel, then starts
  its target; swaps whose evict sets touch each other (or each other's targets) wait their turn,
  disjoint ones run side by side;
* a model being drained or stopped is started again only after its stop finished;
* after BACKOFF_AFTER failed starts in a row, a model is not tried again before a growing delay,
  and ensures say so (503) instead of looping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from swapd.daemon.config import Config, ModelConfig
from swapd.ipc.messages import ModelState

log = logging.getLogger("swapd.scheduler")

BACKOFF_AFTER = 3
BACKOFF_BASE = 5.0
BACKOFF_MAX = 300.0

LOADED: frozenset[ModelState] = frozenset({"starting", "ready", "draining", "stopping"})


class EnsureError(Exception):
    """An ensure that cannot be served; `status` is the HTTP status the proxy answers with."""

    def __init__(
        self, status: int, code: str, message: str, log_tail: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.log_tail = log_tail


class Effects(Protocol):
    async def start(self, model: ModelConfig) -> Any:
        """Start the model's process and wait until it is healthy; returns a handle with
        `.upstream` and `.pid`. Raises an exception with `.status/.code/.message/.log_tail`."""

    async def drain(self, model_id: str) -> None:
        """Phase one of a stop: until every live proxy has no request in flight for it."""

    async def stop(self, model_id: str, handle: Any, model: ModelConfig | None) -> None:
        """Phase two: the process is gone (and its GPUs free, or what lingers recorded)."""

    def evict_for(self, target: str, running: frozenset[str]) -> frozenset[str]: ...

    def changed(self, record: ModelRecord) -> None:
        """A model's state changed (publish it)."""


@dataclass
class ModelRecord:
    id: str
    state: ModelState = "stopped"
    since: float = field(default_factory=time.time)
    handle: Any = None  # lifecycle.Running while a process exists
    model: ModelConfig | None = None  # the definition the process was started with
    reason: str = ""
    failures: int = 0
    retry_at: float = 0.0  # monotonic
    ready_at: float = 0.0  # monotonic, for TTL when no activity was reported yet


@dataclass
class _Swap:
    target: str
    task: asyncio.Task[Any]
    evict: frozenset[str] = frozenset()
    claimed: bool = False


class Scheduler:
    def __init__(
        self,
        config: Config,
        effects: Effects,
        *,
        clock: Callable[[], float] = time.monotonic,
        backoff_base: float = BACKOFF_BASE,
    ) -> None:
        self.config = config
        self.effects = effects
        self.clock = clock
        self.backoff_base = backoff_base
        self.records: dict[str, ModelRecord] = {}
        self.shutting_down = False
        self._swaps: dict[str, _Swap] = {}
        self._stops: dict[str, asyncio.Task[None]] = {}
        self._changed = asyncio.Condition()

    # ------------------------------------------------------------------------------ state

    def record(self, model_id: str) -> ModelRecord:
        rec = self.records.get(model_id)
        if rec is None:
            rec = self.records[model_id] = ModelRecord(model_id)
        return rec

    def _set(self, rec: ModelRecord, state: ModelState, reason: str = "") -> None:
        if rec.state == state and rec.reason == reason:
            return
        log.info("%s: %s -> %s%s", rec.id, rec.state, state, f" ({reason})" if reason else "")
        rec.state = state
        rec.reason = reason
        rec.since = time.time()
        if state == "ready":
            rec.ready_at = self.clock()
        self.effects.changed(rec)

    async def _wake(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _evicting(self, model_id: str) -> bool:
        return model_id in self._stops or any(
            s.claimed and model_id in s.evict for s in self._swaps.values()
        )

    def loaded(self) -> frozenset[str]:
        return frozenset(r.id for r in self.records.values() if r.state in LOADED)

    # ----------------------------------------------------------------------------- ensure

    async def ensure(self, name: str) -> Any:
        """The handle of a ready model (starting it, and swapping others out, when needed)."""
        model = self.config.resolve(name)
        if model is None:
            raise EnsureError(404, "model_not_found", f"no local model {name!r}")
        if self.shutting_down:
            raise EnsureError(503, "shutting_down", "swapd is shutting down")
        rec = self.record(model.id)
        if rec.state == "ready" and not self._evicting(model.id):
            return rec.handle
        swap = self._swaps.get(model.id)
        if swap is None:
            self._check_backoff(rec)
            task = asyncio.get_running_loop().create_task(self._run_swap(model.id))
            swap = self._swaps[model.id] = _Swap(model.id, task)
        # A requester that gives up must not cancel a start others (or the next request) wait for.
        return await asyncio.shield(swap.task)

    def _check_backoff(self, rec: ModelRecord) -> None:
        if rec.failures < BACKOFF_AFTER:
            return
        wait = rec.retry_at - self.clock()
        if wait > 0:
            raise EnsureError(
                503,
                "backing_off",
                f"model {rec.id} failed to start {rec.failures} times in a row; backing off, "
                f"next try in {wait:.0f}s (last error: {rec.reason})",
            )

    def _collides(self, target: str, evict: frozenset[str]) -> bool:
        # The target itself is still being stopped: start it again once that is done. (An evicted
        # model that is already stopping is no collision: the swap joins that stop.)
        if target in self._stops:
            return True
        for other in self._swaps.values():
            if other.target == target or not other.claimed:
                continue
            if target in other.evict or other.target in evict or other.evict & evict:
                return True
        return False

    async def _run_swap(self, target: str) -> Any:
        swap = self._swaps[target]
        try:
            async with self._changed:
                while True:
                    if self.shutting_down:
                        raise EnsureError(503, "shutting_down", "swapd is shutting down")
                    model = self.config.models.get(target)
                    if model is None:
                        raise EnsureError(404, "model_not_found", f"no local model {target!r}")
                    rec = self.record(target)
                    if rec.state == "ready" and not self._evicting(target):
                        return rec.handle
                    running = self.loaded() | {s.target for s in self._swaps.values() if s.claimed}
                    evict = self.effects.evict_for(target, frozenset(running - {target}))
                    if not self._collides(target, evict):
                        break
                    await self._changed.wait()
                swap.evict = evict
                swap.claimed = True
            if evict:
                log.info("%s: swapping out %s", target, ", ".join(sorted(evict)))
                results = await asyncio.gather(
                    *(self.stop(m, f"swapped out for {target}") for m in evict),
                    return_exceptions=True,
                )
                for m, result in zip(sorted(evict), results, strict=False):
                    if isinstance(result, BaseException):
                        log.error("%s: stopping %s failed: %r", target, m, result)
            return await self._start(model)
        finally:
            self._swaps.pop(target, None)
            await self._wake()

    async def _start(self, model: ModelConfig) -> Any:
        rec = self.record(model.id)
        if rec.state == "ready":
            return rec.handle
        self._set(rec, "starting")
        try:
            handle = await self.effects.start(model)
        except asyncio.CancelledError:
            self._set(rec, "stopped", "start cancelled")
            raise
        except Exception as exc:
            rec.handle = None
            rec.failures += 1
            if rec.failures >= BACKOFF_AFTER:
                delay = min(self.backoff_base * 2 ** (rec.failures - BACKOFF_AFTER), BACKOFF_MAX)
                rec.retry_at = self.clock() + delay
            message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            self._set(rec, "failed", message)
            raise EnsureError(
                getattr(exc, "status", 502),
                getattr(exc, "code", "start_failed"),
                message,
                tuple(getattr(exc, "log_tail", ())),
            ) from exc
        rec.handle = handle
        rec.model = model
        rec.failures = 0
        rec.retry_at = 0.0
        self._set(rec, "ready")
        return handle

    # ------------------------------------------------------------------------------- stop

    async def stop(self, model_id: str, reason: str) -> None:
        """Drain and stop one model (joins a stop already under way); no-op when not loaded."""
        existing = self._stops.get(model_id)
        if existing is not None:
            await asyncio.shield(existing)
            return
        rec = self.record(model_id)
        if rec.state == "starting":
            swap = self._swaps.get(model_id)
            if swap is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(swap.task)
            return await self.stop(model_id, reason)
        if rec.state not in LOADED or rec.handle is None:
            return
        task = asyncio.get_running_loop().create_task(self._stop(rec, reason))
        self._stops[model_id] = task
        await asyncio.shield(task)

    async def _stop(self, rec: ModelRecord, reason: str) -> None:
        try:
            if rec.state == "ready":
                self._set(rec, "draining", reason)
                await self.effects.drain(rec.id)
            self._set(rec, "stopping", reason)
            try:
                await self.effects.stop(rec.id, rec.handle, rec.model)
            except Exception:
                log.exception("%s: stop failed", rec.id)
            rec.handle = None
            self._set(rec, "stopped", reason)
        finally:
            self._stops.pop(rec.id, None)
            await self._wake()

    async def unload(self, model_id: str | None, reason: str = "unloaded") -> list[str]:
        """Stop one model (id or alias) or, with None, every loaded one. Returns the ids stopped."""
        if model_id is None:
            targets = sorted(self.loaded() | self._swaps.keys())
        else:
            model = self.config.resolve(model_id)
            mid = model.id if model is not None else model_id
            if model is None and mid not in self.records:
                raise EnsureError(404, "model_not_found", f"no local model {model_id!r}")
            targets = [mid]
        await asyncio.gather(*(self.stop(m, reason) for m in targets))
        return targets

    # ----------------------------------------------------------------- outside events

    def adopt(self, model: ModelConfig, handle: Any) -> None:
        """A process that already runs (found in circusd after a daemon restart) is ready."""
        rec = self.record(model.id)
        rec.handle = handle
        rec.model = model
        self._set(rec, "ready", "adopted")

    def process_exited(self, model_id: str, pid: int, exit_code: int | None) -> bool:
        """A ready model's process died on its own. Returns True when it was one of ours.

        Its state becomes `stopped` (the next request starts it again); the leftover watcher is
        cleaned up like a stop, and a new start of the model waits for that.
        """
        rec = self.records.get(model_id)
        if rec is None or rec.handle is None or getattr(rec.handle, "pid", None) != pid:
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
                await self.effects.stop(model_id, handle, model)
            except Exception:
                log.exception("%s: cleanup after exit failed", model_id)
            finally:
                self._stops.pop(model_id, None)
                await self._wake()

        self._stops[model_id] = asyncio.get_running_loop().create_task(cleanup())
        return True

    async def shutdown(self) -> None:
        """Refuse new ensures; waiting ones get 503."""
        self.shutting_down = True
        await self._wake()

    def replace_config(self, config: Config) -> None:
        self.config = config
        for mid in list(self.records):
            rec = self.records[mid]
            if mid not in config.models and rec.state not in LOADED:
                del self.records[mid]

    def states(self) -> Iterable[ModelRecord]:
        known = set(self.config.models)
        for mid in self.config.models:
            yield self.record(mid)
        for mid, rec in list(self.records.items()):
            if mid not in known:
                yield rec
