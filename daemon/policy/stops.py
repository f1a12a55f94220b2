"""Stopping models, the scheduler's second half: one stop per model (a drain, then the process
taken down), joined by whoever else wants it stopped; putting models to sleep the same way (a
drain, then the server told to give its GPU memory back, its process kept), falling back to a
stop when the sleep fails; collation, which takes a model back from a swap's drain when a request
for it comes first; and a process that exited on its own (a crash), cleaned up like a stop.

A stop that a swap began is collatable: within that swap's collation window a request for the
model cancels the drain, the model serves again, and the swap queues again (`take_back`). Only
those stops are taken back; unloads, TTL stops, reloads and shutdown are not, and a stop that one
of them joins stops being collatable.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import Counter
from typing import Generic

from ...ipc import exits
from ...ipc.causes import DeferCause, StopCause
from ...ipc.routing_table import SleepSetting
from ...ipc.states import LOADED_STATES, ModelState
from ...ipc.swap_record import SwapKind, SwapOutcome
from ..config import ModelConfig
from ..errors import DaemonError, SleepFailed
from . import collation
from .changes import Changes
from .claims import ReadyClaims
from .model_table import ModelTable
from .records import Effects, H, ModelRecord, Stop
from .story import Began, Deferred, Ended
from .swap_queue import SwapQueue

log = logging.getLogger("swapd.scheduler")

TAKEN_BACK = "kept: requested again before its stop"
# The stops after which the model may well be asked for again: its server's conversation caches
# are saved first (`kvCache`). Not a reload (its definition changed: the files would not fit),
# nor shutdown (which must be quick), nor a model whose process is gone or asleep (a sleep saved
# them before it fell asleep).
SAVING_CAUSES = frozenset({StopCause.SWAP, StopCause.UNLOAD, StopCause.TTL})
# The take-downs whose drain is told only once the Readys out for the model are claimed: a swap
# (another model's need) and a TTL (a Ready out is a request: the model is not idle after all)
# never outrank the requests the model was just made ready for; an operator's unload or sleep,
# and a reload, do.
WAITS_FOR_READYS = frozenset({StopCause.SWAP, StopCause.TTL})


class Stops(Generic[H]):
    def __init__(
        self,
        models: ModelTable[H],
        effects: Effects[H],
        swaps: SwapQueue[H],
        changes: Changes,
        claims: ReadyClaims,
    ) -> None:
        self.models = models
        self.effects = effects
        self.swaps = swaps
        self.changes = changes
        self.claims = claims
        self._stops: dict[str, asyncio.Task[None]] = {}
        # The drain under way of each draining model, cancelled when collation takes it back.
        self._draining: dict[str, asyncio.Task[None]] = {}
        # Models whose stop a swap began (only those may be taken back by their requests).
        self._collatable: set[str] = set()
        # Models an unload is stopping: ensures for them wait, then start them again.
        self.unloading: Counter[str] = Counter()
        # Models whose take-down under way ends asleep (a sleep), not stopped.
        self._to_sleep: set[str] = set()
        # How many times each model fell asleep: what a sleep asked for ended in, even when a
        # request woke the model at once.
        self.fell_asleep: Counter[str] = Counter()

    def under_way(self, model_id: str) -> bool:
        """Whether `model_id` is being stopped (or an unload is about to stop it)."""
        return model_id in self._stops or model_id in self.unloading

    def collatable(self, model_id: str) -> bool:
        """Whether a request for `model_id` may still take it back from its stop (collation)."""
        return model_id in self._collatable

    def tasks(self) -> list[asyncio.Task[None]]:
        return list(self._stops.values())

    # ------------------------------------------------------------------------------- stop

    async def stop(self, model_id: str, stop: Stop, *, collatable: bool = False) -> None:
        """Drain and stop one model (joins a stop already under way; after a sleep under way,
        stops it asleep); nothing when it is not loaded. `collatable`: a swap stops it, so a
        request for it may still take it back while it drains (collation). With `stop.sleep`,
        put it to sleep instead (`sleep`)."""
        existing = self._stops.get(model_id)
        if existing is not None:
            if not collatable:
                # An unload, a TTL or a reload wants it stopped too: no request takes it back.
                self._collatable.discard(model_id)
            sleeping = model_id in self._to_sleep
            await asyncio.shield(existing)
            if sleeping and not stop.sleep:
                await self.stop(model_id, stop)  # asleep now (or stopped): stop it
            return
        rec = self.models.record(model_id)
        if rec.state in (ModelState.STARTING, ModelState.WAKING):
            swap = self.swaps.get(model_id)
            if swap is not None and swap.task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(swap.task)
            else:
                # Its swap was answered otherwise and taken out of the queue (an unload under
                # way): its start is ending, and that swap's end is a change.
                await self.changes.wait(None)
            return await self.stop(model_id, stop)
        if rec.state not in LOADED_STATES or rec.handle is None:
            return
        if stop.sleep and rec.state == ModelState.ASLEEP:
            return
        task = asyncio.get_running_loop().create_task(self._stop(rec, stop))
        self._stops[model_id] = task
        if stop.sleep:
            self._to_sleep.add(model_id)
        if collatable:
            self._collatable.add(model_id)
        await asyncio.shield(task)

    async def sleep(self, model_id: str, why: Stop, *, collatable: bool = False) -> None:
        """Drain one model and put it to sleep (joins a sleep or a stop under way); stopped
        instead when its sleep fails, or when its config has no sleep setting any more."""
        await self.stop(model_id, dataclasses.replace(why, sleep=True), collatable=collatable)

    async def _stop(self, rec: ModelRecord[H], stop: Stop) -> None:
        try:
            # Its take-down begins with its drain; asleep, with its stop (no drain, no sleep).
            began = Began(rec.id, SwapKind.STOP, stop.cause, stop.for_model)
            drains = rec.state == ModelState.READY
            if drains:
                self.models.set(rec, ModelState.DRAINING, stop.text, stop)
                self.effects.happened(began)
                drain = asyncio.get_running_loop().create_task(self._drain(rec.id, stop))
                self._draining[rec.id] = drain
                try:
                    await asyncio.wait([drain])
                finally:
                    if self._draining.get(rec.id) is drain:
                        del self._draining[rec.id]
                    if not drain.done():
                        drain.cancel()  # this stop was cancelled itself
                if drain.cancelled() or self._stops.get(rec.id) is not asyncio.current_task():
                    return  # collation took the model back (`take_back` set it ready)
                drain.result()
            self._collatable.discard(rec.id)
            handle = rec.handle
            assert handle is not None
            if stop.sleep:
                failed = await self._sleep(rec, handle, stop)
                if failed is None:
                    return
                stop = failed
            rec.asleep_with = None
            self.models.set(rec, ModelState.STOPPING, stop.text, stop)
            if not drains:
                self.effects.happened(began)
            # A swap stopping this model starts its own target right after.
            follows = self.swaps.start_follows(rec.id)
            save = drains and stop.cause in SAVING_CAUSES
            try:
                await self.effects.stop(rec.id, handle, rec.model, start_follows=follows, save=save)
            except Exception:
                log.exception("%s: stop failed", rec.id)
            rec.handle = None
            self.models.set(rec, ModelState.STOPPED, stop.text, stop)
            self.claims.drop(rec.id)
            self.effects.happened(
                Ended(rec.id, SwapOutcome.OK, stop.text, SwapKind.STOP, cause=stop.cause)
            )
        finally:
            if self._stops.get(rec.id) is asyncio.current_task():
                del self._stops[rec.id]
                self._collatable.discard(rec.id)
                self._to_sleep.discard(rec.id)
            self.changes.fire()

    async def _drain(self, model_id: str, stop: Stop) -> None:
        """Phase one: every proxy acked the drain, and every `Ready` handed out before it was
        claimed. A proxy that handles such a `Ready` after it heard of the drain does not admit
        it (the model drains there) and the request asks again: the stop waits for that word,
        so that the request does not meet a closed port. For a swap or a TTL the Readys are
        claimed first, before the drain is told (`WAITS_FOR_READYS`): else the run started or
        woken for those requests is taken out before it serves them, a wasted start or wake,
        whichever way the take-down got past step 11 (a TTL never asks it). An unload, a reload
        and a sleep asked for drain at once (docs/swapping.md)."""
        if stop.cause in WAITS_FOR_READYS and self.claims.out(model_id):
            if stop.for_model:  # the swap's record says why it waited
                self.effects.happened(Deferred(stop.for_model, DeferCause.UNCLAIMED_READY))
            await self.claims.settled(model_id)
        await self.effects.drain(model_id)
        await self.claims.settled(model_id)

    async def _sleep(self, rec: ModelRecord[H], handle: H, why: Stop) -> Stop | None:
        """Put a drained model to sleep: None once it is asleep, or why it must be stopped
        instead (its sleep failed; its config has no sleep setting any more)."""
        model = self.models.config.models.get(rec.id)
        setting: SleepSetting | None = model.sleep if model is not None else None
        if setting is None:
            return dataclasses.replace(why, sleep=False)
        self.models.set(rec, ModelState.SLEEPING, why.text, why)
        try:
            await self.effects.sleep(rec.id, handle, rec.model, setting)
        except DaemonError as exc:
            cause = exc.cause if isinstance(exc, SleepFailed) else StopCause.SLEEP_FAILED
            failed = Stop(cause, why.for_model, detail=exc.message)
        except Exception as exc:  # a bug in the machinery: still a stop, never a hang
            log.exception("%s: sleep failed", rec.id)
            failed = Stop(StopCause.SLEEP_FAILED, why.for_model, f"{type(exc).__name__}: {exc}")
        else:
            rec.asleep_with = setting
            self.fell_asleep[rec.id] += 1
            self.models.set(rec, ModelState.ASLEEP, why.text, why)
            self.effects.happened(Ended(rec.id, SwapOutcome.OK, why.text, SwapKind.SLEEP))
            return None
        log.warning("%s: %s", rec.id, failed.text)
        return failed

    # -------------------------------------------------------------------------- collation

    def take_back(self, rec: ModelRecord[H], now: float) -> bool:
        """A request for a model that swaps are draining: within their collation window (each
        target's `maxWait`), cancel the drain so that the model serves it, and send those swaps
        back to the queue."""
        drain = self._draining.get(rec.id)
        if drain is None or drain.done():
            # Over (every proxy acked): its stop goes on as soon as it resumes, so the request
            # waits for that stop and starts the model again.
            return False
        swaps = self.swaps.stopping(rec.id)
        if not swaps or rec.id not in self._collatable or rec.id in self.unloading:
            return False
        config = self.models.config
        if any(now - s.turn.queued_at >= collation.window(config, s.target) for s in swaps):
            return False
        for swap in swaps:
            swap.queued(yielded_at=now)
        drain.cancel()
        # At once, not when the stop task notices: the next request must see the model ready.
        self._stops.pop(rec.id, None)
        self._collatable.discard(rec.id)
        self.models.set(rec, ModelState.READY, TAKEN_BACK)
        # Its take-down ends with nothing done: a stop's record of its own, folded into no swap.
        self.effects.happened(Ended(rec.id, SwapOutcome.OK))
        return True

    # ---------------------------------------------------------------------------- cleanup

    def exited(self, model_id: str, pid: int, exit_code: int | None) -> bool:
        """A ready (or asleep) model's process `pid` died on its own: True when it was its own
        (then it is `stopped`, and its leftover watcher is cleaned up like a stop; a new start of
        the model waits for that)."""
        rec = self.models.records.get(model_id)
        if rec is None or rec.handle is None or rec.handle.pid != pid:
            return False
        if rec.state not in (ModelState.READY, ModelState.ASLEEP) or model_id in self._stops:
            return False
        # By a signal: that is the cause; by its own exit code: it gave up on its own.
        ended = (
            f"was {exits.said(exit_code)}"
            if exits.signal_of(exit_code) is not None
            else f"exited on its own ({exits.said(exit_code)})"
        )
        crash = Stop(StopCause.CRASH, detail=f"process {pid} {ended}")
        log.warning("%s: %s", model_id, crash.text)
        handle, model = rec.handle, rec.model
        rec.handle = rec.asleep_with = None
        self.models.set(rec, ModelState.STOPPED, crash.text, crash)
        self.claims.drop(model_id)
        self.effects.happened(Began(model_id, SwapKind.CRASH, StopCause.CRASH))
        self.effects.happened(Ended(model_id, SwapOutcome.OK, crash.text))
        self._clean_up(model_id, handle, model)
        return True

    def _clean_up(self, model_id: str, handle: H, model: ModelConfig | None) -> None:

        async def cleanup() -> None:
            try:
                await self.effects.stop(model_id, handle, model, start_follows=False)
            except Exception:
                log.exception("%s: cleanup after exit failed", model_id)
            finally:
                self._stops.pop(model_id, None)
                self.changes.fire()

        self._stops[model_id] = asyncio.get_running_loop().create_task(cleanup())
