"""The scheduler: for each `ensure`, serve now, join a start, queue, or start a swap.

Plain logic over an `Effects` object (the process machinery, the drain protocol and the event
publisher in the daemon; a fake in the unit tests), `Readings` (what it reads of the world before
it decides) and an eviction policy (`eviction/contract.py`, chosen per config by
`eviction/choose.py`). It owns every model's lifecycle state: stopped -> starting -> ready ->
draining -> stopping -> stopped, plus failed, and for a model with a sleep setting ready ->
draining -> sleeping -> asleep -> waking -> ready (a failed sleep or wake falls back to a stop,
and a wake's to a cold start). Its parts: the models' records (`model_table.py`),
the swaps under way (`swap_queue.py`, each a `swap.Swap` in an explicit phase), the starts
(`starts.py`) and the stops (`stops.py`), a queued swap's decision, steps 7 to 12 below
(`deciding.py`; `room.py` builds what the policy is shown), and the take-downs asked for from
outside, unloads, sleeps, TTL and reload stops (`take_downs.py`). Each tells the story of what
it does to a model as it happens (`story.py`) to the effects, for the swap log.

Just over 400 lines on purpose: the decision tree below (about 65 lines) is the one written
account of the whole policy, and it belongs beside the class that follows it (about 300 lines,
each step's work delegated to the parts above).

The decision tree. For each `ensure(model_id)` (a name is resolved to its id once, where the
request enters the daemon):

 1. An unknown model: 404. swapd is shutting down: 503.
 2. Ready, and no swap or stop is taking it down: serve it now.
    Whenever an ensure is answered with a handle, its `Ready` is booked for the proxy that asked
    (`claims.py`) until that proxy claims it (admitted, its request is in flight from the same
    report on): meanwhile no swap takes the model out (step 11).
 3. Draining for a swap still in its collation window (its target's `maxWait`): take it back
    (the drain is cancelled, the swap queues again) and serve it now.
 4. A swap to it is under way: join it. One swap per target; every waiter gets its result.
 5. Backing off after repeated failed starts: 503 `backing_off`, saying when it tries again.
 6. Otherwise a new swap is queued, and runs on its own (`_run`).

A queued swap decides when it is queued, at every change after (a state, a stop or swap that
ended, an unload, a busy reading), and at its last decision's deadline:

 7. Read what the decision needs, before deciding: the GPUs' memory when the policy places the
    target by memory (an asleep target on the GPUs it holds, its residual counted as its own);
    the busy checks its last decision asked to read again.
 8. Answered otherwise (unloaded, swapd shutting down): end. The target gone from the config (a
    reload): 404.
 9. The target is ready and nothing takes it down (a swap that ended meanwhile started it): done.
10. Ask the eviction policy. Refuse: 503 `no_gpu_room`. Wait (busy models, GPU room): wait, and
    decide again at the next change or the deadline.
11. MakeRoom, but a claimed swap stops this target or one of its evictees, or targets one of
    them; or the target itself is still being stopped; or an evictee has Readys out that are not
    claimed yet (deferred: `DeferCause.UNCLAIMED_READY`, until claimed or CLAIM_WITHIN): wait
    for a change. Nobody waits for the swap (only loads without `wait`, or requests whose
    clients went away) and it would take out a model in use: wait until that one is idle, or
    someone waits (`collation.py`).
12. A swap ahead in the queue (higher `priority`; then past its `maxWait`, by arrival; then the
    cheaper swap-in, `collation.py`) that may begin now conflicts with this one: wait for a
    change, or for the order to change. Placement by memory neither waits for the queue nor
    holds it.
13. Claim: drain and stop the evictees in parallel, or put them to sleep where the policy says
    (a request that takes one back sends the swap back to 7; placed by memory, a swap that put
    models to sleep goes back to 7 too, to decide again with them asleep at their residual), then
    start the target (where the placement put it), or wake it when it is asleep.
14. A reload changed the target's definition while it started: stop what started and go back to
    7, for the same waiters. A failed start answers every waiter; after BACKOFF_AFTER in a row
    the model backs off.

Swaps that claim disjoint rooms run side by side; an unload answers the ensures already waiting
for its model with 503 `model_unloaded` (a start under way is aborted, its process stopped), and
ensures that arrive after it wait for the stop, then start the model again (docs/swapping.md).
`sleep` puts a model to sleep on request, and `idle` takes one out of the GPU the way its setting
says (asleep when it can sleep, stopped otherwise), for its TTL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Generic

import msgspec

from ...ipc.causes import StopCause
from ...ipc.states import ModelState
from ..config import Config, ModelConfig
from ..errors import EnsureError, ModelNotFound, ShuttingDown
from .changes import Changes
from .claims import ReadyClaims
from .deciding import Decider
from .eviction.choose import choose
from .eviction.contract import EvictionPolicy, Occupant
from .model_table import ModelTable
from .records import Effects, H, ModelRecord, Readings, Stop
from .starts import BACKOFF_AFTER, BACKOFF_BASE, BACKOFF_MAX, Starts
from .stops import Stops
from .swap import Abort, Claim, Phase, Swap, retrieve
from .swap_queue import SwapQueue
from .take_downs import TakeDowns

__all__ = ["BACKOFF_AFTER", "BACKOFF_BASE", "BACKOFF_MAX", "EnsureError", "Scheduler"]

log = logging.getLogger("swapd.scheduler")

Chooser = Callable[[Config], EvictionPolicy]


class Scheduler(Generic[H]):
    def __init__(
        self,
        config: Config,
        effects: Effects[H],
        readings: Readings,
        *,
        choose_policy: Chooser = choose,
        clock: Callable[[], float] = time.monotonic,
        backoff_base: float = BACKOFF_BASE,
    ) -> None:
        self.effects = effects
        self.choose_policy = choose_policy
        self.clock = clock
        self.shutting_down = False
        self.changes = Changes()
        self.claims = ReadyClaims(clock, self.changes)
        self.models: ModelTable[H] = ModelTable(config, effects)
        self.swaps: SwapQueue[H] = SwapQueue()
        self.stops: Stops[H] = Stops(self.models, effects, self.swaps, self.changes, self.claims)
        self.starts: Starts[H] = Starts(self.models, effects, clock, backoff_base)
        self.decider: Decider[H] = Decider(
            self.models, self.swaps, self.stops, self.claims, effects, readings, self.changes,
            policy=choose_policy(config), clock=clock, check_aborted=self._check_aborted,
        )  # fmt: skip
        self.take_downs: TakeDowns[H] = TakeDowns(self.models, self.swaps, self.stops, self.changes)

    @property
    def config(self) -> Config:
        return self.models.config

    @property
    def records(self) -> dict[str, ModelRecord[H]]:
        return self.models.records

    def record(self, model_id: str) -> ModelRecord[H]:
        return self.models.record(model_id)

    def loaded(self) -> frozenset[str]:
        return self.models.loaded()

    def states(self) -> Iterator[ModelRecord[H]]:
        return self.models.states()

    def readings_changed(self) -> None:
        """What `Readings` report changed (a busy check's reading): waiting swaps decide again."""
        self.changes.fire()

    def waiting(self, target: str) -> str:
        """What the swap to `target` waits for now ("": none waits, or it is deciding)."""
        swap = self.swaps.get(target)
        waits = swap.waits if swap is not None else None
        return waits.on if waits is not None else ""

    # ----------------------------------------------------------------------------- ensure

    async def ensure(self, model_id: str, claimant: str = "", *, waits: bool = True) -> H:
        """The handle of a ready model (starting it, and swapping others out, when needed);
        booked as a `Ready` out for the proxy `claimant` until it claims it (`claimed`).
        `waits` False: a load nobody waits for (`?wait=false`): its swap takes out no model in
        use until someone waits for it (`collation.py`)."""
        # 1.
        if model_id not in self.config.models:
            raise ModelNotFound(f"no local model {model_id!r}")
        if self.shutting_down:
            raise ShuttingDown()
        rec = self.record(model_id)
        # 2.
        if rec.state == ModelState.READY and rec.handle is not None:
            if not self.decider.taken_down(model_id):
                self.claims.hand_out(model_id, {claimant: 1})
                return rec.handle
        # 3.
        if rec.state == ModelState.DRAINING and rec.handle is not None:
            if self.stops.take_back(rec, self.clock()):
                self.claims.hand_out(model_id, {claimant: 1})
                return rec.handle
        # 4.
        swap = self.swaps.get(model_id)
        if swap is None:
            # 5.
            self.starts.check_backoff(rec)
            # 6.
            loop = asyncio.get_running_loop()
            priority = self.config.priority.get(model_id, 0)
            swap = self.swaps.add(model_id, loop.create_future(), priority, self.clock())
            swap.result.add_done_callback(retrieve)
            self.effects.waiting(model_id, "", swap.turn.queued_at)
            swap.task = loop.create_task(self._run(swap))
        if not waits:
            return await self.claims.join(swap.result, swap.claimants, model_id, claimant)
        swap.watchers += 1
        if swap.watchers == 1:
            swap.watched(self.clock())
            self.changes.fire()  # a swap nobody waited for goes on as any other now
        try:
            return await self.claims.join(swap.result, swap.claimants, model_id, claimant)
        finally:
            swap.watchers -= 1

    def claimed(self, model_id: str, proxy: str, count: int = 1) -> None:
        """Proxy `proxy` handled `count` Readys for `model_id` it was sent (`claims.py`)."""
        self.claims.claimed(model_id, proxy, count)

    # ------------------------------------------------------------------------------- a swap

    async def _run(
        self, swap: Swap[H], adopting: Coroutine[object, object, H | None] | None = None
    ) -> None:
        try:
            handle: H | None = None
            if adopting is not None:
                handle = await self._adopt(swap, adopting)
            if handle is None:
                handle = await self._swap(swap)
        except asyncio.CancelledError:
            if not swap.result.done():
                swap.result.set_exception(ShuttingDown())
            raise
        except BaseException as exc:
            if not swap.result.done():
                swap.result.set_exception(exc)
        else:
            if not swap.result.done():
                swap.result.set_result(handle)
                # Now, before any other swap decides: each waiter's Ready is out from here on.
                self.claims.hand_out(swap.target, swap.claimants)
        finally:
            self.swaps.remove(swap)
            self.effects.ended(swap.target)
            self.changes.fire()

    async def _adopt(
        self, swap: Swap[H], adopting: Coroutine[object, object, H | None]
    ) -> H | None:
        """A process found starting: its handle once healthy; None when it was not (the swap
        goes on as any other, for the same waiters)."""
        handle = await self.starts.start(swap, self.config.models[swap.target], adopting)
        if handle is not None and swap.phase is Phase.RESTARTING:
            # A reload changed the definition just as the adopted process became healthy.
            await self.stops.stop(swap.target, Stop(StopCause.RELOAD))
            handle = None
        self._check_aborted(swap)
        if handle is None:
            swap.queued()
        return handle

    async def _swap(self, swap: Swap[H]) -> H:
        target = swap.target
        while True:
            ready = await self.decider.until_claimed(swap)
            if ready is not None:
                return ready
            claim = swap.claim
            assert claim is not None
            # 13.
            if claim.taken:
                swap.stopping()
                await self._stop_evictees(target, claim)
                if swap.phase is Phase.QUEUED:
                    # Collation took a model back: queue again (first in line at this priority).
                    log.info("%s: waits again: a model it was stopping serves its requests", target)
                    continue
                model = self.config.models.get(target)
                if (
                    claim.sleep
                    and model is not None
                    and self.decider.terms(model).decides_again_asleep
                ):
                    # What the sleepers still hold is known now: decide again with it.
                    log.info("%s: decides again with %s asleep", target, ", ".join(claim.sleep))
                    swap.queued()
                    continue
            self._check_aborted(swap)
            # A reload during the evictions may have changed or removed the target.
            model = self.config.models.get(target)
            if model is None:
                raise ModelNotFound(f"no local model {target!r}")
            if claim.gpus is not None:
                model = msgspec.structs.replace(model, gpus=claim.gpus)
            handle = await self.starts.start(swap, model)
            self._check_aborted(swap)  # unloaded just as it became ready: the unload stops it
            if swap.phase is not Phase.RESTARTING:
                assert handle is not None  # None only for an aborted start, which raised above
                return handle
            # 14.
            log.info("%s: definition changed while starting; starting the new one", target)
            if handle is not None:
                await self.stops.stop(target, Stop(StopCause.RELOAD))
            swap.queued()

    async def _stop_evictees(self, target: str, claim: Claim) -> None:
        words = [*sorted(claim.evict), *(f"{m} (to sleep)" for m in sorted(claim.sleep))]
        log.info("%s: swapping out %s", target, ", ".join(words))
        ordered = sorted(claim.taken)
        why = Stop(StopCause.SWAP, for_model=target)
        results = await asyncio.gather(
            *(
                self.stops.sleep(m, why, collatable=True)
                if m in claim.sleep
                else self.stops.stop(m, why, collatable=True)
                for m in ordered
            ),
            return_exceptions=True,
        )
        for m, result in zip(ordered, results, strict=True):
            if isinstance(result, BaseException):
                log.error("%s: stopping %s failed: %r", target, m, result)

    def occupants(self) -> list[Occupant]:
        """Every model with a process or a claimed start (for the GPU footprints' samples)."""
        return list(self.decider.occupants(None).values())

    def _check_aborted(self, swap: Swap[H]) -> None:
        if swap.abort is not None:
            raise swap.abort.error
        if self.shutting_down:
            raise ShuttingDown()

    # ------------------------------------------------------------------------- stop, unload

    async def stop(self, model_id: str, cause: StopCause) -> None:
        """Drain and stop one model (TTL, reload); `take_downs.py`."""
        await self.take_downs.stop(model_id, cause)

    async def idle(self, model_id: str, cause: StopCause) -> None:
        """Its TTL ran out: asleep or stopped, as its setting says; `take_downs.py`."""
        await self.take_downs.idle(model_id, cause)

    async def sleep(self, model_id: str, cause: StopCause = StopCause.SLEEP) -> ModelState:
        """Put one model to sleep on request; the state it ended in; `take_downs.py`."""
        return await self.take_downs.sleep(model_id, cause)

    async def unload(self, model_id: str | None, cause: StopCause = StopCause.UNLOAD) -> list[str]:
        """Stop one model or, with None, every loaded one; the ids stopped; `take_downs.py`."""
        return await self.take_downs.unload(model_id, cause)

    # ------------------------------------------------------------------------ outside events

    def adopt(self, model: ModelConfig, handle: H, *, asleep: bool = False) -> None:
        """A process that already runs (found in circusd after a daemon restart) is ready, or
        asleep (the last daemon put it to sleep)."""
        self.starts.adopted(model, handle, asleep=asleep)

    def adopt_when_healthy(
        self, model: ModelConfig, waiting: Coroutine[object, object, H | None]
    ) -> None:
        """A process found starting (the previous daemon died mid-start). Ensures join it as they
        join a start; `waiting` returns its handle once healthy, or None when it did not become
        healthy (then the same swap starts the model afresh). Cancelling `waiting` must stop it."""
        loop = asyncio.get_running_loop()
        swap = self.swaps.add(model.id, loop.create_future(), 0, self.clock())
        swap.result.add_done_callback(retrieve)
        swap.claimed(Claim(frozenset()))  # its model counts as running for other swaps meanwhile
        swap.task = loop.create_task(self._run(swap, waiting))

    def process_exited(self, model_id: str, pid: int, exit_code: int | None) -> bool:
        """A ready model's process died on its own. Returns True when it was one of ours (then
        it is `stopped`, and the next request starts it again)."""
        return not self.shutting_down and self.stops.exited(model_id, pid, exit_code)

    async def shutdown(self) -> None:
        """Refuse new ensures; waiting ones get 503 at once. Starts under way go on (the next
        daemon adopts them) unless `abort_starts` stops them."""
        self.shutting_down = True
        for swap in self.swaps:
            swap.aborted(Abort(ShuttingDown(), StopCause.SHUTDOWN), cancel_start=False)
        self.changes.fire()

    def stops_under_way(self) -> list[asyncio.Task[None]]:
        """The stops running now (unloads, and cleanups after a process exited on its own)."""
        return self.stops.tasks()

    def tasks(self) -> list[asyncio.Task[None]]:
        """The swaps and stops under way (for the daemon to cancel as it exits)."""
        swaps = [s.task for s in self.swaps if s.task is not None]
        return [*swaps, *self.stops.tasks()]

    async def abort_starts(self) -> list[str]:
        """Cancel every start under way and wait until each stopped what it had started."""
        swaps = [s for s in self.swaps if s.start is not None]
        for swap in swaps:
            swap.aborted(Abort(ShuttingDown(), StopCause.SHUTDOWN))
        tasks = [s.task for s in swaps if s.task is not None]
        if tasks:
            await asyncio.wait(tasks)
        return [s.target for s in swaps]

    async def reconfigure(
        self, config: Config, stop: Iterable[str], outdated: Callable[[ModelConfig], bool]
    ) -> list[str]:
        """Switch to `config` (and the eviction policy chosen for it). Models in `stop` (loaded
        with a definition that changed) are drained and stopped; a start whose definition is
        `outdated` is aborted and its swap starts the new definition for the same waiters (or
        answers 404 when the model is gone). Returns the ids whose start was aborted."""
        self.replace_config(config)
        restarted = []
        for swap in self.swaps:
            start = swap.start
            if swap.phase is Phase.STARTING and start is not None and outdated(start.model):
                swap.restarting()
                restarted.append(swap.target)
        # A wake aborted above stops its (asleep) process itself, and its swap starts the new
        # definition: stopping it here too would stop that new start.
        stopping = [m for m in stop if m not in restarted]
        await asyncio.gather(*(self.stops.stop(m, Stop(StopCause.RELOAD)) for m in stopping))
        return restarted

    def replace_config(self, config: Config) -> None:
        self.models.configure(config)
        self.decider.policy = self.choose_policy(config)
        self.changes.fire()
