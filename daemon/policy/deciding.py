"""Steps 7 to 12 of the decision tree (`scheduler.py`): a queued swap's way to its claim. It reads
what the decision needs (the busy checks its last decision asked for, the GPUs when its policy's
terms read them), asks the eviction policy, and waits (parked on the scheduler's change signal,
or until the decision's deadline) while the answer is to wait, the room it wants collides with a
swap under way, a model it would take out has `Ready` replies out not claimed yet (`claims.py`),
nobody waits for it and it would take out a model in use, or a swap ahead in the queue
(`collation.order`: priority, maxWait, swap-in cost) conflicts with it. It ends once the swap
claimed its room, or its target is ready.

Also here: what the policy is shown (`room.py` builds the ask and the occupants; an asleep target
placed by memory may wake only on the GPUs it holds).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Generic

import msgspec

from ...ipc.causes import DeferCause, WaitCause
from ...ipc.states import ModelState
from ..config import ModelConfig
from ..errors import ModelNotFound, NoGpuRoom
from . import collation, room
from .changes import Changes
from .claims import ReadyClaims
from .eviction.contract import EvictionPolicy, MakeRoom, Occupant, Refuse, Room, Terms, Wait
from .eviction.preemption import BUSY_POLL
from .model_table import ModelTable
from .records import Effects, H, Parked, Readings
from .stops import Stops
from .story import Deferred
from .swap import Claim, Swap
from .swap_queue import SwapQueue


class Decider(Generic[H]):
    def __init__(
        self,
        models: ModelTable[H],
        swaps: SwapQueue[H],
        stops: Stops[H],
        claims: ReadyClaims,
        effects: Effects[H],
        readings: Readings,
        changes: Changes,
        *,
        policy: EvictionPolicy,
        clock: Callable[[], float],
        check_aborted: Callable[[Swap[H]], None],
    ) -> None:
        self.models = models
        self.swaps = swaps
        self.stops = stops
        self.claims = claims
        self.effects = effects
        self.readings = readings
        self.changes = changes
        # The config's eviction policy: the scheduler replaces it at every reload.
        self.policy = policy
        self.clock = clock
        # Raises what the swap's waiters were answered when it was answered otherwise.
        self.check_aborted = check_aborted

    def terms(self, model: ModelConfig) -> Terms:
        return self.policy.terms(model)

    def taken_down(self, model_id: str) -> bool:
        """Whether a stop or a swap is taking `model_id` down."""
        return self.stops.under_way(model_id) or self.swaps.evicting(model_id)

    async def until_claimed(self, swap: Swap[H]) -> H | None:
        """Steps 7 to 12, until the swap has claimed its room (None) or its target is ready
        (its handle)."""
        target = swap.target
        while True:
            waits = swap.waits
            # 7.
            last = waits.decision if waits is not None else None
            if waits is not None and isinstance(last, Wait) and last.check:
                await self._read_busy_checks(swap, last.check)
                waits.asked.update(dict.fromkeys(last.check, self.clock()))
                waits.decision = None
            model = self._waking_on_its_gpus(target)
            gpus = None
            if model is not None and self.terms(model).reads_gpus:
                gpus = await self.readings.gpus(model, self._read_with(target))
            # 8.
            self.check_aborted(swap)
            model = self._waking_on_its_gpus(target)
            if model is None:
                raise ModelNotFound(f"no local model {target!r}")
            assert waits is not None
            # 9.
            rec = self.models.record(target)
            if rec.state == ModelState.READY and rec.handle and not self.taken_down(target):
                return rec.handle
            # 10.
            now = self.clock()
            occupants = self.occupants(target)
            window = collation.window(self.models.config, target)
            decision = self.policy.decide(room.ask(swap, model, now, window), Room(occupants, gpus))
            waits.decision = decision
            self.effects.decided(model, decision)
            if isinstance(decision, Refuse):
                raise NoGpuRoom(decision.reason)
            if isinstance(decision, Wait):
                if decision.for_room and waits.room_since is None:
                    waits.room_since = now
                if not decision.check:
                    why = None
                    if decision.cause is not None:
                        why = Parked(decision.cause, decision.serving, decision.at_latest)
                    await self._park(swap, decision.reason, decision.until, why)
                continue
            # 11.
            if self.stops.under_way(target):
                why = Parked(WaitCause.STOPPING, (target,))
                await self._park(swap, f"{target} is being stopped", None, why)
                continue
            if self.swaps.collides(target, decision.evict):
                why = Parked(WaitCause.STOPPING)
                await self._park(swap, "collides with a swap under way", None, why)
                continue
            held = self.claims.holding(decision.evict)
            if held:
                words = ", ".join(f"{m} ({n})" for m, n in held.items())
                on = f"requests made ready for {words} to be admitted first"
                until = self.claims.due(frozenset(held))
                why = Parked(WaitCause.ADMITTING, tuple(sorted(held)))
                await self._park(swap, on, until, why, DeferCause.UNCLAIMED_READY)
                continue
            # 11a.
            if swap.watchers == 0:
                used = collation.in_use(decision.evict, occupants, time.time())
                if used:
                    why = Parked(WaitCause.UNWATCHED, used)
                    on = f"nobody waits for it; {', '.join(used)} in use"
                    await self._park(swap, on, now + BUSY_POLL, why)
                    continue
            # 12.
            if self.terms(model).in_queue_order:
                ahead = self._ahead_in_conflict(swap, decision)
                if ahead is not None:
                    other, change = ahead
                    on = f"behind the swap to {other.target} in the queue"
                    await self._park(swap, on, change, Parked(WaitCause.QUEUE, (other.target,)))
                    continue
            # 13.
            swap.claimed(Claim(decision.stop, decision.placement, decision.sleep))
            self.effects.waiting(target, "", swap.turn.queued_at)
            return None

    def order(self, swap: Swap[H], now: float) -> collation.OrderKey:
        """The swap's place in the queue at `now`: priority, then past its maxWait, then its
        target's swap-in cost (`collation.py`)."""
        rec = self.models.records.get(swap.target)
        waking = rec is not None and rec.state == ModelState.ASLEEP
        cost = self.readings.swap_in_cost(swap.target, waking=waking)
        window = collation.window(self.models.config, swap.target)
        return collation.order(swap.turn, window, cost, now)

    def _ahead_in_conflict(
        self, swap: Swap[H], mine: MakeRoom
    ) -> tuple[Swap[H], float | None] | None:
        """A swap ahead in the queue that may begin now and conflicts with `swap`'s claim, and
        when the order between them may change (one of them past its maxWait)."""
        now = self.clock()
        for other in self.swaps.ahead(swap, lambda s: self.order(s, now)):
            model = self.models.config.models.get(other.target)
            if model is None or not self.terms(model).in_queue_order:
                continue
            window = collation.window(self.models.config, other.target)
            ask = room.ask(other, model, now, window)
            theirs = self.policy.decide(ask, Room(self.occupants(other.target)))
            if not isinstance(theirs, MakeRoom):
                continue
            if self.stops.under_way(other.target) or self.swaps.collides(
                other.target, theirs.evict
            ):
                continue
            if (
                other.target == swap.target
                or other.target in mine.evict
                or swap.target in theirs.evict
                or theirs.evict & mine.evict
            ):
                config = self.models.config
                turns = [(s.turn, collation.window(config, s.target)) for s in (swap, other)]
                return other, collation.next_change(turns, now)
        return None

    async def _park(
        self,
        swap: Swap[H],
        on: str,
        until: float | None,
        why: Parked | None = None,
        deferred: DeferCause | None = None,
    ) -> None:
        """Wait for a change, or until `until` (monotonic) at the latest; `on` says what for,
        `why` the same as a type (told to the effects: it is what the swap waits for until it
        decides otherwise), and `deferred` why a swap whose room was decided is held back (told
        as its story's `Deferred`)."""
        waits = swap.waits
        assert waits is not None
        waits.on = on
        self.effects.waiting(swap.target, on, swap.turn.queued_at, why)
        if deferred is not None:
            self.effects.happened(Deferred(swap.target, deferred))
        try:
            await self.changes.wait(None if until is None else max(0.0, until - self.clock()))
        finally:
            waits.on = ""

    async def _read_busy_checks(self, swap: Swap[H], models: frozenset[str]) -> None:
        """The busy checks of `models` read again, or until the swap is answered otherwise."""
        reading = asyncio.ensure_future(self.readings.check_busy(models))
        either: set[asyncio.Future[Any]] = {reading, swap.result}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            reading.cancel()

    def _waking_on_its_gpus(self, target: str) -> ModelConfig | None:
        """The target's definition; an asleep one placed by memory may be placed only on the
        GPUs its process holds (it wakes where it sleeps)."""
        model = self.models.config.models.get(target)
        rec = self.models.records.get(target)
        if model is None or rec is None or rec.state != ModelState.ASLEEP or not model.gpus_auto:
            return model
        held = rec.model.gpus if rec.model is not None else None
        return msgspec.structs.replace(model, gpus_allowed=held) if held else model

    def _read_with(self, target: str) -> list[Occupant]:
        """What a GPU reading attributes memory to: the occupants, and a target with a process
        (asleep), whose residual is its own, not a stranger's."""
        occupants = list(self.occupants(target).values())
        rec = self.models.records.get(target)
        if rec is not None and rec.handle is not None:
            model = rec.model or self.models.config.models.get(target)
            occupants.append(room.occupant(target, model, rec.state, rec.handle, self.readings))
        return occupants

    def occupants(self, target: str | None) -> dict[str, Occupant]:
        """Every model with a process or a claimed start, but `target` (None: every one)."""
        return room.occupants(
            self.models.config,
            self.swaps.claims(),
            self.models.records.values(),
            self.readings,
            target,
        )
