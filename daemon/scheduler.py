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
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..ipc.messages import ModelState
from .config import Config, ModelConfig

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
    # What the ensures await. Separate from the task so that an unload or a shutdown can answer
    # them at once while the task still cleans up (an aborted start stops its process first).
    result: asyncio.Future[Any]
    task: asyncio.Task[Any] | None = None
    evict: frozenset[str] = frozenset()
    claimed: bool = False
    starting: asyncio.Task[Any] | None = None  # effects.start under way
    model: ModelConfig | None = None  # the definition being started
    failed: EnsureError | None = None  # unloaded / shutting down: the waiters got this
    why: str = ""  # the model's reason when its start is aborted
    restart: bool = False  # a reload changed the definition being started


def _retrieve(future: asyncio.Future[Any]) -> None:
    # Every waiter may have given up: the outcome is still consumed (no "never retrieved" noise).
    if not future.cancelled():
        future.exception()


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
        # Models an unload is stopping: ensures for them wait, then start them again.
        self._unloading: Counter[str] = Counter()
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
        return (
            model_id in self._stops
            or model_id in self._unloading
            or any(s.claimed and model_id in s.evict for s in self._swaps.values())
        )

    def start_follows(self, model_id: str) -> bool:
        """Whether a swap is stopping `model_id` in order to start its own target next."""
        return any(
            s.claimed and s.failed is None and model_id in s.evict for s in self._swaps.values()
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
            loop = asyncio.get_running_loop()
            swap = self._swaps[model.id] = _Swap(model.id, loop.create_future())
            swap.result.add_done_callback(_retrieve)
            swap.task = loop.create_task(self._run_swap(swap))
        # A requester that gives up must not cancel a start others (or the next request) wait for.
        return await asyncio.shield(swap.result)

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
        if target in self._stops or target in self._unloading:
            return True
        for other in self._swaps.values():
            if other.target == target or not other.claimed:
                continue
            if target in other.evict or other.target in evict or other.evict & evict:
                return True
        return False

    async def _run_swap(
        self, swap: _Swap, adopting: Coroutine[Any, Any, Any] | None = None
    ) -> None:
        try:
            handle = None
            if adopting is not None:
                model = self.config.models[swap.target]
                handle = await self._start(swap, model, adopting)
                if handle is not None and swap.restart:
                    # A reload changed the definition just as the adopted process became healthy.
                    await self.stop(swap.target, "config changed")
                    handle = None
            if handle is None:
                handle = await self._swap(swap)
        except asyncio.CancelledError:
            self._answer(swap, EnsureError(503, "shutting_down", "swapd is shutting down"))
            raise
        except BaseException as exc:
            if not swap.result.done():
                swap.result.set_exception(exc)
        else:
            if not swap.result.done():
                swap.result.set_result(handle)
        finally:
            if self._swaps.get(swap.target) is swap:
                del self._swaps[swap.target]
            await self._wake()

    async def _swap(self, swap: _Swap) -> Any:
        target = swap.target
        while True:
            async with self._changed:
                while True:
                    self._check_aborted(swap)
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
            self._check_aborted(swap)
            # A reload during the evictions may have changed or removed the target.
            model = self.config.models.get(target)
            if model is None:
                raise EnsureError(404, "model_not_found", f"no local model {target!r}")
            swap.restart = False
            handle = await self._start(swap, model)
            self._check_aborted(swap)  # unloaded just as it became ready: the unload stops it
            if not swap.restart:
                return handle
            # A reload changed the definition while it started: the same waiters get the new one.
            log.info("%s: definition changed while starting; starting the new one", target)
            if handle is not None:
                await self.stop(target, "config changed")
            swap.claimed = False
            swap.evict = frozenset()

    def _check_aborted(self, swap: _Swap) -> None:
        if swap.failed is not None:
            raise swap.failed
        if self.shutting_down:
            raise EnsureError(503, "shutting_down", "swapd is shutting down")

    def _answer(self, swap: _Swap, error: EnsureError) -> None:
        if not swap.result.done():
            swap.result.set_exception(error)

    def _abort(
        self, swap: _Swap, error: EnsureError, why: str, *, cancel_start: bool = True
    ) -> None:
        """Answer the swap's waiters with `error` now; the swap stops at its next step (a start
        under way is cancelled, which stops the process it started)."""
        if swap.failed is None:
            swap.failed = error
            swap.why = why
        self._answer(swap, error)
        if cancel_start and swap.starting is not None:
            swap.starting.cancel()

    async def _start(
        self,
        swap: _Swap,
        model: ModelConfig,
        adopting: Coroutine[Any, Any, Any] | None = None,
    ) -> Any:
        """Start `model` (or wait for a process found starting to become healthy: `adopting`);
        None when an unload, a shutdown or a reload aborted the start, or the adoption failed."""
        rec = self.record(model.id)
        if rec.state == "ready":
            if adopting is not None:
                adopting.close()
            return rec.handle
        swap.model = model
        self._set(rec, "starting", "adopting" if adopting is not None else "")
        starter = adopting if adopting is not None else self.effects.start(model)
        swap.starting = asyncio.get_running_loop().create_task(starter)
        try:
            handle = await swap.starting
        except asyncio.CancelledError:
            this = asyncio.current_task()
            aborted = swap.failed is not None or swap.restart
            if not aborted or (this is not None and this.cancelling()):
                self._set(rec, "stopped", "start cancelled")
                raise
            # The start cleaned up after itself (its process is stopped).
            rec.handle = None
            why = swap.why if swap.failed is not None else "config changed"
            self._set(rec, "stopped", f"start aborted: {why}")
            return None
        except Exception as exc:
            rec.handle = None
            rec.failures += 1
            if rec.failures >= BACKOFF_AFTER:
                delay = min(self.backoff_base * 2 ** (rec.failures - BACKOFF_AFTER), BACKOFF_MAX)
                rec.retry_at = self.clock() + delay
            if isinstance(exc, EnsureError):
                self._set(rec, "failed", exc.message)
                raise
            # A bug in the machinery: still an answer to the waiters, never a hang.
            error = EnsureError(502, "start_failed", f"{type(exc).__name__}: {exc}")
            self._set(rec, "failed", error.message)
            raise error from exc
        finally:
            swap.starting = None
            swap.model = None
        if handle is None:  # the adopted process did not become healthy (and was stopped)
            self._set(rec, "stopped", "was starting when the daemon restarted; not healthy")
            return None
        rec.handle = handle
        rec.model = model
        rec.failures = 0
        rec.retry_at = 0.0
        self._set(rec, "ready", "adopted" if adopting is not None else "")
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
                raise EnsureError(404, "model_not_found", f"no local model {model_id!r}")
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
                    EnsureError(
                        503,
                        "model_unloaded",
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

    def adopt(self, model: ModelConfig, handle: Any) -> None:
        """A process that already runs (found in circusd after a daemon restart) is ready."""
        rec = self.record(model.id)
        rec.handle = handle
        rec.model = model
        self._set(rec, "ready", "adopted")

    def adopt_when_healthy(self, model: ModelConfig, waiting: Coroutine[Any, Any, Any]) -> None:
        """A process found starting (the previous daemon died mid-start). Ensures join it as they
        join a start; `waiting` returns its handle once healthy, or None when it did not become
        healthy (then the same swap starts the model afresh). Cancelling `waiting` must stop it."""
        loop = asyncio.get_running_loop()
        swap = self._swaps[model.id] = _Swap(model.id, loop.create_future())
        swap.result.add_done_callback(_retrieve)
        swap.claimed = True  # its model counts as running for other swaps meanwhile
        swap.task = loop.create_task(self._run_swap(swap, waiting))

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
        """Refuse new ensures; waiting ones get 503 at once. Starts under way go on (the next
        daemon adopts them) unless `abort_starts` stops them."""
        self.shutting_down = True
        error = EnsureError(503, "shutting_down", "swapd is shutting down")
        for swap in list(self._swaps.values()):
            self._abort(swap, error, "swapd is shutting down", cancel_start=False)
        await self._wake()

    def stops_under_way(self) -> list[asyncio.Task[None]]:
        """The stops running now (unloads, and cleanups after a process exited on its own)."""
        return list(self._stops.values())

    def tasks(self) -> list[asyncio.Task[Any]]:
        """The swaps and stops under way (for the daemon to cancel as it exits)."""
        swaps = [s.task for s in self._swaps.values() if s.task is not None]
        return [*swaps, *self._stops.values()]

    async def abort_starts(self) -> list[str]:
        """Cancel every start under way and wait until each stopped what it had started."""
        swaps = [s for s in self._swaps.values() if s.starting is not None]
        for swap in swaps:
            self._abort(
                swap,
                EnsureError(503, "shutting_down", "swapd is shutting down"),
                "swapd is shutting down",
            )
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
            if mid not in config.models and rec.state not in LOADED:
                del self.records[mid]

    def states(self) -> Iterable[ModelRecord]:
        known = set(self.config.models)
        for mid in self.config.models:
            yield self.record(mid)
        for mid, rec in list(self.records.items()):
            if mid not in known:
                yield rec
