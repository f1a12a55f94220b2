"""How a swap runs: ensure a model is ready, evicting what the eviction policy names, starting it,
and the collisions between swaps. `Scheduler` (scheduler.py) adds stops, unloads and the events
that come from outside (exits, adoption, reload, shutdown); the rules are listed there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Protocol

from ...ipc.model_status import ModelState
from ..config import Config, ModelConfig
from ..errors import BackingOff, EnsureError, ModelNotFound, ShuttingDown, StartFailed
from . import placing
from .collation import BUSY_POLL, COLLATE_WINDOW, Collation
from .records import LOADED_STATES, Effects, H, ModelRecord, Swap, retrieve

log = logging.getLogger("swapd.scheduler")

BACKOFF_AFTER = 3
BACKOFF_BASE = 5.0
BACKOFF_MAX = 300.0


class Hold(Protocol):
    """What a swap asks before it stops models (`policy/busy.py`'s `SwapHold`)."""

    def needed(self, models: Iterable[str]) -> frozenset[str]: ...

    async def wait(
        self, target: str, models: frozenset[str], aborted: asyncio.Future[Any]
    ) -> frozenset[str]: ...


class SwapEngine(Collation[H]):
    def __init__(
        self,
        config: Config,
        effects: Effects[H],
        *,
        canonical_gpus: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        backoff_base: float = BACKOFF_BASE,
        placer: placing.Placer | None = None,
        collate_window: float = COLLATE_WINDOW,
    ) -> None:
        self.config = config
        self.effects = effects
        # Places `gpus: auto` models by memory (daemon/placer.py); None: they get every GPU.
        self.placer = placer
        # Every spelling of each GPU -> one id, for the eviction policy (`gpu.canonical_gpu_ids`).
        self.canonical_gpus = canonical_gpus
        self.clock = clock
        self.backoff_base = backoff_base
        self.collate_window = collate_window
        self._seq = 0
        # The drain under way of each draining model, cancelled when collation takes it back.
        self._draining: dict[str, asyncio.Task[None]] = {}
        # Models whose stop a swap began (only those may be taken back by their requests).
        self._collatable: set[str] = set()
        self.records: dict[str, ModelRecord[H]] = {}
        self.shutting_down = False
        self._swaps: dict[str, Swap[H]] = {}
        self._stops: dict[str, asyncio.Task[None]] = {}
        # Models an unload is stopping: ensures for them wait, then start them again.
        self._unloading: Counter[str] = Counter()
        self._changed = asyncio.Condition()
        # Busy models hold a swap that would stop them (`busyCheck`); None: nothing holds one.
        self.hold: Hold | None = None

    async def stop(self, model_id: str, reason: str, *, collatable: bool = False) -> None:
        raise NotImplementedError  # Scheduler.stop

    async def _start_effect(self, model: ModelConfig) -> H | None:
        return await self.effects.start(model)

    # ------------------------------------------------------------------------------ state

    def record(self, model_id: str) -> ModelRecord[H]:
        rec = self.records.get(model_id)
        if rec is None:
            rec = self.records[model_id] = ModelRecord(model_id)
        return rec

    def _set(self, rec: ModelRecord[H], state: ModelState, reason: str = "") -> None:
        if rec.state == state and rec.reason == reason:
            return
        log.info("%s: %s -> %s%s", rec.id, rec.state, state, f" ({reason})" if reason else "")
        rec.state = state
        rec.reason = reason
        rec.since = time.time()
        if state == "ready":
            rec.ready_at = self.clock()
        self.effects.changed(rec, self.config.models.get(rec.id))

    async def _wake(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _evicting(self, model_id: str) -> bool:
        return (
            model_id in self._stops
            or model_id in self._unloading
            or any(s.claimed and model_id in s.evict for s in self._swaps.values())
        )

    def _start_follows(self, model_id: str) -> bool:
        """Whether a swap is stopping `model_id` in order to start its own target next."""
        return any(
            s.claimed and s.failed is None and model_id in s.evict for s in self._swaps.values()
        )

    def occupants(self) -> list[placing.Occupant]:
        """Every model with a process, and the targets of claimed swaps (placed, maybe not started
        yet), each with the definition it runs or starts with."""
        result = []
        for s in self._swaps.values():
            model = s.model or self.config.models.get(s.target)
            if s.claimed and model is not None:
                model = placing.with_gpus(model, s.gpus)
                result.append(placing.Occupant(s.target, model, "starting", None))
        have = {o.model for o in result}
        for r in self.records.values():
            if r.state in LOADED_STATES and r.model is not None and r.id not in have:
                pid = r.handle.pid if r.handle else None
                started = getattr(r.handle, "started_at", 0.0)
                result.append(placing.Occupant(r.id, r.model, r.state, pid, started))
        return result

    def loaded(self) -> frozenset[str]:
        return frozenset(r.id for r in self.records.values() if r.state in LOADED_STATES)

    # ----------------------------------------------------------------------------- ensure

    async def ensure(self, name: str) -> H:
        """The handle of a ready model (starting it, and swapping others out, when needed)."""
        model = self.config.resolve(name)
        if model is None:
            raise ModelNotFound(f"no local model {name!r}")
        if self.shutting_down:
            raise ShuttingDown()
        rec = self.record(model.id)
        if rec.state == "ready" and rec.handle is not None and not self._evicting(model.id):
            return rec.handle
        if rec.state == "draining" and rec.handle is not None and self._collate(rec):
            return rec.handle
        swap = self._swaps.get(model.id)
        if swap is None:
            self._check_backoff(rec)
            loop = asyncio.get_running_loop()
            self._seq += 1
            swap = self._swaps[model.id] = Swap(
                model.id,
                loop.create_future(),
                priority=self.config.priority.get(model.id, 0),
                seq=self._seq,
                queued_at=self.clock(),
            )
            swap.result.add_done_callback(retrieve)
            swap.task = loop.create_task(self._run_swap(swap))
        # A requester that gives up must not cancel a start others (or the next request) wait for.
        return await asyncio.shield(swap.result)

    def _check_backoff(self, rec: ModelRecord[H]) -> None:
        if rec.failures < BACKOFF_AFTER:
            return
        wait = rec.retry_at - self.clock()
        if wait > 0:
            raise BackingOff(
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
        self, swap: Swap[H], adopting: Coroutine[object, object, H | None] | None = None
    ) -> None:
        try:
            handle: H | None = None
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
            self._answer(swap, ShuttingDown())
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

    async def _claim(self, swap: Swap[H]) -> H | None:
        """Wait until the swap may evict what it must, and claim that; or the target's handle,
        when it is ready. Busy evictees are asked first (`hold`), outside the lock: meanwhile
        they serve on, and other swaps go on."""
        target = swap.target
        asked: frozenset[str] = frozenset()
        while True:
            async with self._changed:
                while True:
                    self._check_aborted(swap)
                    model = self.config.models.get(target)
                    if model is None:
                        raise ModelNotFound(f"no local model {target!r}")
                    rec = self.record(target)
                    if rec.state == "ready" and rec.handle and not self._evicting(target):
                        return rec.handle
                    if model.gpus_auto and self.placer is not None:
                        placed = await placing.decide(
                            self.placer, swap, model, self.occupants(), self.config, self.clock()
                        )
                        if placed is None:  # busy models in the way: decide again soon
                            await self._wait(placing.RETRY)
                            continue
                        if not self._collides(target, placed):
                            evict = placed
                            break
                        await self._wait(None)
                        continue
                    evict, polling = self._claimable(swap)
                    if evict is not None and not self._blocked_by_queue(swap, evict):
                        break
                    await self._wait(BUSY_POLL if polling else None)
                ask = self.hold.needed(evict - asked) if self.hold is not None else frozenset()
                if not ask:
                    swap.evict = evict
                    swap.claimed = True
                    return None
            assert self.hold is not None
            asked |= await self.hold.wait(target, ask, swap.result)

    async def _swap(self, swap: Swap[H]) -> H:
        target = swap.target
        while True:
            ready = await self._claim(swap)
            if ready is not None:
                return ready
            evict = swap.evict
            if evict:
                log.info("%s: swapping out %s", target, ", ".join(sorted(evict)))
                ordered = sorted(evict)
                results = await asyncio.gather(
                    *(self.stop(m, f"swapped out for {target}", collatable=True) for m in ordered),
                    return_exceptions=True,
                )
                for m, result in zip(ordered, results, strict=False):
                    if isinstance(result, BaseException):
                        log.error("%s: stopping %s failed: %r", target, m, result)
                if not swap.claimed:
                    # Collation took a model back: queue again (first in line at this priority).
                    log.info("%s: waits again: a model it was stopping serves its requests", target)
                    continue
            self._check_aborted(swap)
            # A reload during the evictions may have changed or removed the target.
            model = self.config.models.get(target)
            if model is None:
                raise ModelNotFound(f"no local model {target!r}")
            swap.restart = False
            handle = await self._start(swap, placing.with_gpus(model, swap.gpus))
            self._check_aborted(swap)  # unloaded just as it became ready: the unload stops it
            if not swap.restart:
                assert handle is not None  # None only for an aborted start, which raised above
                return handle
            # A reload changed the definition while it started: the same waiters get the new one.
            log.info("%s: definition changed while starting; starting the new one", target)
            if handle is not None:
                await self.stop(target, "config changed")
            swap.claimed = False
            swap.evict = frozenset()
            swap.gpus = None

    async def _wait(self, timeout: float | None) -> None:
        """Wait (the condition's lock held) for a change, or at most `timeout` seconds."""
        if timeout is None:
            await self._changed.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    def _check_aborted(self, swap: Swap[H]) -> None:
        if swap.failed is not None:
            raise swap.failed
        if self.shutting_down:
            raise ShuttingDown()

    def _answer(self, swap: Swap[H], error: EnsureError) -> None:
        if not swap.result.done():
            swap.result.set_exception(error)

    def _abort(
        self, swap: Swap[H], error: EnsureError, why: str, *, cancel_start: bool = True
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
        swap: Swap[H],
        model: ModelConfig,
        adopting: Coroutine[object, object, H | None] | None = None,
    ) -> H | None:
        """Start `model` (or wait for a process found starting to become healthy: `adopting`);
        None when an unload, a shutdown or a reload aborted the start, or the adoption failed."""
        rec = self.record(model.id)
        if rec.state == "ready":
            if adopting is not None:
                adopting.close()
            return rec.handle
        swap.model = model
        self._set(rec, "starting", "adopting" if adopting is not None else "")
        starter = adopting if adopting is not None else self._start_effect(model)
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
            error = StartFailed(f"{type(exc).__name__}: {exc}")
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
