"""Starting models, the scheduler's first half: a start under way (or a process found starting
after a daemon restart, awaited until healthy) with the states it goes through, how an aborted or
failed start ends, and back-off after repeated failed starts; and waking an asleep model, which a
failed wake turns into a stop and a cold start."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Generic

from ...ipc.causes import StopCause
from ...ipc.routing_table import SleepSetting
from ...ipc.states import ModelState
from ...ipc.swap_record import SwapKind, SwapOutcome
from ..config import ModelConfig
from ..errors import BackingOff, DaemonError, EnsureError, StartFailed, WakeUnverified
from .model_table import ModelTable
from .records import Effects, H, ModelRecord, Stop
from .story import Began, Ended
from .swap import Phase, Start, Swap

log = logging.getLogger("swapd.scheduler")

BACKOFF_AFTER = 3
BACKOFF_BASE = 5.0
BACKOFF_MAX = 300.0


class Starts(Generic[H]):
    def __init__(
        self,
        models: ModelTable[H],
        effects: Effects[H],
        clock: Callable[[], float],
        backoff_base: float = BACKOFF_BASE,
    ) -> None:
        self.models = models
        self.effects = effects
        self.clock = clock
        self.backoff_base = backoff_base

    def check_backoff(self, rec: ModelRecord[H]) -> None:
        """Raise BackingOff (503) while a model that failed to start too often waits its turn."""
        if rec.failures < BACKOFF_AFTER:
            return
        wait = rec.retry_at - self.clock()
        if wait > 0:
            raise BackingOff(
                f"model {rec.id} failed to start {rec.failures} times in a row; backing off, "
                f"next try in {wait:.0f}s (last error: {rec.reason})",
            )

    async def start(
        self,
        swap: Swap[H],
        model: ModelConfig,
        adopting: Coroutine[object, object, H | None] | None = None,
    ) -> H | None:
        """Start `model` for `swap` (or wait for a process found starting to become healthy:
        `adopting`); None when an unload, a shutdown or a reload aborted the start, or the
        adopted process did not become healthy. A failed start raises its `EnsureError`."""
        models = self.models
        rec = models.record(model.id)
        if rec.state == ModelState.READY:
            if adopting is not None:
                adopting.close()
            return rec.handle
        if rec.state == ModelState.ASLEEP and adopting is None:
            woken = await self._wake(swap, rec, model)
            if not isinstance(woken, _FellBack):
                return woken
            if swap.abort is not None:
                return None  # unloaded while its wake fell back: no cold start
        rec.adopted = adopting is not None
        models.set(rec, ModelState.STARTING, "adopting" if adopting is not None else "")
        self.effects.happened(Began(rec.id, SwapKind.START, adopted=rec.adopted))
        starter = adopting if adopting is not None else self._start(model)
        start = Start(model, asyncio.get_running_loop().create_task(starter))
        swap.starting(start)
        try:
            handle = await start.task
        except asyncio.CancelledError:
            if not self._cancelled(swap, rec, "start"):
                raise
            return None
        except Exception as exc:
            rec.handle = None
            rec.failures += 1
            if rec.failures >= BACKOFF_AFTER:
                delay = min(self.backoff_base * 2 ** (rec.failures - BACKOFF_AFTER), BACKOFF_MAX)
                rec.retry_at = self.clock() + delay
            if isinstance(exc, EnsureError):
                self._failed(rec, exc.message)
                raise
            # A bug in the machinery: still an answer to the waiters, never a hang.
            error = StartFailed(f"{type(exc).__name__}: {exc}")
            self._failed(rec, error.message)
            raise error from exc
        finally:
            swap.started()
        if handle is None:  # the adopted process did not become healthy (and was stopped)
            unhealthy = Stop(StopCause.UNHEALTHY)
            models.set(rec, ModelState.STOPPED, unhealthy.text, unhealthy)
            self.effects.happened(Ended(rec.id, SwapOutcome.ABORTED, unhealthy.text))
            return None
        rec.handle = handle
        rec.model = model
        rec.failures = 0
        rec.retry_at = 0.0
        models.set(rec, ModelState.READY, "adopted" if adopting is not None else "")
        self.effects.happened(Ended(rec.id, SwapOutcome.OK))
        return handle

    def _failed(self, rec: ModelRecord[H], message: str) -> None:
        self.models.set(rec, ModelState.FAILED, message)
        self.effects.happened(Ended(rec.id, SwapOutcome.FAILED, message))

    def _cancelled(self, swap: Swap[H], rec: ModelRecord[H], what: str) -> bool:
        """A start or a wake (`what`) was cancelled, which stopped its process: the record says
        so. True when an unload, a shutdown or a reload aborted it (the swap goes on to answer or
        start again); False when the swap's own task is cancelled (the caller raises)."""
        rec.handle = rec.asleep_with = None
        this = asyncio.current_task()
        aborted = swap.phase in (Phase.ABORTED, Phase.RESTARTING)
        if not aborted or (this is not None and this.cancelling()):
            self._aborted(rec, f"{what} cancelled", Stop(StopCause.SHUTDOWN))
            return False
        why = Stop(swap.abort.cause if swap.abort is not None else StopCause.RELOAD)
        self._aborted(rec, f"{what} aborted: {why.text}", why)
        return True

    def _aborted(self, rec: ModelRecord[H], reason: str, why: Stop) -> None:
        self.models.set(rec, ModelState.STOPPED, reason, why)
        self.effects.happened(Ended(rec.id, SwapOutcome.ABORTED, reason))

    def adopted(self, model: ModelConfig, handle: H, *, asleep: bool = False) -> None:
        """A process that already runs (found in circusd after a daemon restart) is ready, or
        asleep (with the sleep setting it has now: its wake sends those calls)."""
        rec = self.models.record(model.id)
        rec.handle = handle
        rec.model = model
        rec.adopted = True
        if asleep and model.sleep is not None:
            rec.asleep_with = model.sleep
            self.models.set(rec, ModelState.ASLEEP, "adopted asleep")
        else:
            self.models.set(rec, ModelState.READY, "adopted")

    async def _start(self, model: ModelConfig) -> H | None:
        return await self.effects.start(model)

    async def _wake(
        self, swap: Swap[H], rec: ModelRecord[H], model: ModelConfig
    ) -> H | _FellBack | None:
        """Wake an asleep model: its handle once ready; None when an unload, a shutdown or a
        reload aborted the wake (which stopped its process); `_FELL_BACK` when the wake failed
        and the model was stopped (the caller starts it cold)."""
        models = self.models
        handle = rec.handle
        assert handle is not None
        setting = rec.asleep_with or model.sleep
        if setting is None:  # cannot happen: asleep only with a setting
            setting = SleepSetting(sleep=())
        models.set(rec, ModelState.WAKING, "")
        self.effects.happened(Began(rec.id, SwapKind.WAKE, adopted=rec.adopted))
        task = asyncio.get_running_loop().create_task(
            self.effects.wake(rec.id, handle, rec.model, setting)
        )
        swap.starting(Start(rec.model or model, task))
        try:
            await task
        except asyncio.CancelledError:
            if not self._cancelled(swap, rec, "wake"):
                raise
            return None
        except Exception as exc:
            words = exc.message if isinstance(exc, DaemonError) else f"{type(exc).__name__}: {exc}"
            # A wake whose probe answered wrongly is a cause of its own: it may serve garbage.
            cause = (
                StopCause.WAKE_UNVERIFIED
                if isinstance(exc, WakeUnverified)
                else StopCause.WAKE_FAILED
            )
            failed = Stop(cause, detail=words)
            log.warning("%s: %s", rec.id, failed.text)
            models.set(rec, ModelState.STOPPING, failed.text, failed)
            # The wake's record ends here; the stop and the cold start that follow have theirs.
            self.effects.happened(Ended(rec.id, SwapOutcome.FAILED, failed.text))
            self.effects.happened(Began(rec.id, SwapKind.STOP, failed.cause))
            try:
                await self.effects.stop(rec.id, handle, rec.model, start_follows=True)
            except Exception:
                log.exception("%s: stop after a failed wake failed", rec.id)
            rec.handle = rec.asleep_with = None
            models.set(rec, ModelState.STOPPED, failed.text, failed)
            self.effects.happened(Ended(rec.id, SwapOutcome.OK, failed.text, SwapKind.STOP))
            return _FELL_BACK
        finally:
            swap.started()
        rec.asleep_with = None
        models.set(rec, ModelState.READY, "woken")
        self.effects.happened(Ended(rec.id, SwapOutcome.OK))
        return handle


class _FellBack:
    """`_wake`'s answer when the wake failed and the model was stopped: start it cold."""


_FELL_BACK = _FellBack()
