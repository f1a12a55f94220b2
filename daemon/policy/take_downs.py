"""Taking models out of the way on request, the scheduler's answers to the operator and the
timers: an unload (which answers the swaps waiting for its model first), a stop (a TTL, a
reload), a sleep asked for, and an idle model taken out the way its setting says. Each is a stop
or a sleep of `stops.py`; none asks the eviction policy."""

from __future__ import annotations

import asyncio
from typing import Generic

from ...ipc.causes import StopCause
from ...ipc.states import LOADED_STATES, ModelState
from ..errors import CannotSleep, ModelNotFound, ModelUnloaded, NotRunning
from .changes import Changes
from .model_table import ModelTable
from .records import H, Stop
from .stops import Stops
from .swap import Abort
from .swap_queue import SwapQueue


class TakeDowns(Generic[H]):
    def __init__(
        self, models: ModelTable[H], swaps: SwapQueue[H], stops: Stops[H], changes: Changes
    ) -> None:
        self.models = models
        self.swaps = swaps
        self.stops = stops
        self.changes = changes

    async def stop(self, model_id: str, cause: StopCause) -> None:
        """Drain and stop one model (TTL, reload; joins a stop under way); nothing when it is
        not loaded."""
        await self.stops.stop(model_id, Stop(cause))

    async def idle(self, model_id: str, cause: StopCause) -> None:
        """Take an idle model out of the GPU the way its setting says (its TTL ran out): put it
        to sleep when it has a sleep setting, stop it otherwise."""
        model = self.models.config.models.get(model_id)
        if model is not None and model.sleep is not None:
            await self.stops.sleep(model_id, Stop(cause))
        else:
            await self.stops.stop(model_id, Stop(cause))

    async def sleep(self, model_id: str, cause: StopCause = StopCause.SLEEP) -> ModelState:
        """Put one model to sleep on request (`swapd sleep`, the Sleep button): drained, then
        asleep (or stopped, when its sleep fails). Returns what happened: `stopped` when it did
        not fall asleep, else its state now (`asleep`, or `waking`/`ready` when a request woke
        it at once). A model
        without a sleep setting is 400 `cannot_sleep`; one that is not running, 409."""
        model = self.models.config.models.get(model_id)
        if model is None:
            raise ModelNotFound(f"no local model {model_id!r}")
        if model.sleep is None:
            raise CannotSleep(
                f"model {model_id} has no sleep setting (docs/configuration.md, sleep): it can "
                "be unloaded, not put to sleep"
            )
        rec = self.models.record(model_id)
        if rec.state in (ModelState.STARTING, ModelState.WAKING) or self.swaps.get(model_id):
            raise NotRunning(f"model {model_id} is starting; put it to sleep once it is ready")
        if rec.state not in LOADED_STATES:
            raise NotRunning(f"model {model_id} is not running; there is nothing to put to sleep")
        slept = self.stops.fell_asleep[model_id]
        await self.stops.sleep(model_id, Stop(cause))
        state = self.models.record(model_id).state
        if state != ModelState.ASLEEP and self.stops.fell_asleep[model_id] == slept:
            return ModelState.STOPPED  # its sleep failed (or a stop under way was joined)
        # Asleep; or woken already by a request that came at once (waking, ready, ...).
        return state

    async def unload(self, model_id: str | None, cause: StopCause = StopCause.UNLOAD) -> list[str]:
        """Stop one model (by id) or, with None, every loaded one. Returns the ids stopped.

        Ensures already waiting for a model when its unload arrives get 503 `model_unloaded` (a
        start under way is aborted); ensures that arrive later wait until it stopped, then start
        it again."""
        if model_id is None:
            targets = sorted(self.models.loaded() | self.swaps.targets())
        else:
            if model_id not in self.models.config.models and model_id not in self.models.records:
                raise ModelNotFound(f"no local model {model_id!r}")
            targets = [model_id]
        await asyncio.gather(*(self._unload(m, cause) for m in targets))
        return targets

    async def _unload(self, model_id: str, cause: StopCause) -> None:
        unloading = self.stops.unloading
        unloading[model_id] += 1
        try:
            swap = self.swaps.pop(model_id)
            if swap is not None:
                error = ModelUnloaded(
                    f"model {model_id} was unloaded while this request waited for it; "
                    "send the request again to start it again",
                )
                swap.aborted(Abort(error, cause))
                self.changes.fire()
                assert swap.task is not None
                await asyncio.wait([swap.task])
            await self.stops.stop(model_id, Stop(cause))
        finally:
            unloading[model_id] -= 1
            if unloading[model_id] <= 0:
                del unloading[model_id]
            self.changes.fire()
