"""A `Ready` and the next swap's drain are ordered (docs/swapping.md, "A model made ready serves
its waiting requests first"), with the fake Effects and a stand-in for one proxy (no processes):
1,000 seeded random interleavings of requests for two and three models, some of them able to sleep
(a swap puts them to sleep, a request wakes them), each `Ready` delayed on its way to the proxy by
a random number of turns of the loop, while the proxy sees every drain at once; requests come at
random, and some wait until a swap to their model is under way, to join it. No start or wake is
wasted (no run stopped or put to sleep before it served a request), no request is sent to a run
already taken out or asks again, and each is answered by the model it asked for."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass

from swapd.daemon.config import Config, ModelConfig
from swapd.daemon.config.sections.sleep_fields import PRESETS
from swapd.daemon.policy.records import Activity, ModelRecord
from swapd.daemon.policy.scheduler import Scheduler
from swapd.ipc.causes import DeferCause, StopCause
from swapd.ipc.routing_table import SleepSetting
from swapd.ipc.states import SERVING_STATES, ModelState
from tests.support.models import Clock
from tests.support.scheduler import FakeEffects, Handle, make_config, until

PROXY = "proxy-1"
INTERLEAVINGS = 1000
TRANSIT = 8  # at most this many turns of the loop between a Ready and its proxy handling it
SERVE = 8  # a request is served for at most this many turns
SEND = 30  # a request is sent after at most this many turns
START = 150  # a start takes at most this many turns (long ones outlast collation's window)
WAKE = 40  # a wake takes at most this many turns
SLEEPS = (PRESETS["vllm"], PRESETS["comfyui"])
JOIN_WITHIN = 200  # a request that joins a swap waits at most this many turns for one


@dataclass
class Run:
    """One start or wake of a model (a process brought in), and what it served."""

    model: str
    served: int = 0
    stopped: bool = False


class OneProxy(FakeEffects):
    """The fake Effects, and what one proxy does around them: it counts its requests in flight
    (the scheduler's activity reading), hears a drain at once (then admits nothing on a Ready for
    that model and acks once none is in flight), and forgets the drain when the model's next run
    begins, as the proxy's mirror does."""

    def __init__(self, config: Config, rng: random.Random | None = None) -> None:
        super().__init__(config)
        self.rng = rng
        self.in_flight: Counter[str] = Counter()
        self.draining: set[str] = set()
        self.runs: dict[int, Run] = {}  # by pid: its run now (a wake begins a new one)
        self.wasted: list[str] = []

    async def start(self, m: ModelConfig) -> Handle:
        handle = await super().start(m)
        if self.rng is not None:
            await _turns(self.rng.randrange(START))
        self.runs[handle.pid] = Run(m.id)
        return handle

    async def wake(
        self, model_id: str, handle: Handle, m: ModelConfig | None, setting: SleepSetting
    ) -> None:
        await super().wake(model_id, handle, m, setting)
        if self.rng is not None:
            await _turns(self.rng.randrange(WAKE))
        self.runs[handle.pid] = Run(model_id)

    async def sleep(
        self, model_id: str, handle: Handle, m: ModelConfig | None, setting: SleepSetting
    ) -> None:
        await super().sleep(model_id, handle, m, setting)
        self._taken_out(model_id, handle)

    async def drain(self, model_id: str) -> None:
        self.log.append(("drain", model_id))
        self.draining.add(model_id)
        await until(lambda: not self.in_flight[model_id], f"{model_id}'s requests to end")

    async def stop(
        self,
        model_id: str,
        handle: Handle,
        m: ModelConfig | None,
        *,
        start_follows: bool,
        save: bool = False,
    ) -> None:
        await super().stop(model_id, handle, m, start_follows=start_follows, save=save)
        self._taken_out(model_id, handle)

    def _taken_out(self, model_id: str, handle: Handle) -> None:
        run = self.runs[handle.pid]
        if not run.stopped and run.served == 0:
            self.wasted.append(f"{model_id} (pid {handle.pid})")
        run.stopped = True

    def changed(self, record: ModelRecord[Handle], model: ModelConfig | None) -> None:
        super().changed(record, model)
        if record.state in SERVING_STATES:
            self.draining.discard(record.id)

    def activity(self, model_id: str) -> Activity:
        return Activity(in_flight=self.in_flight[model_id] > 0)


async def _turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _request(
    sched: Scheduler[Handle],
    fx: OneProxy,
    rng: random.Random,
    model_id: str,
    out: Counter[str],
    joins: bool = False,
) -> None:
    """One request for `model_id`: its proxy's ensure, the Ready in transit, then admitted (or
    not: the model drains there, or it is gone), served, done. One that `joins` is sent once a
    swap to its model is under way (or after JOIN_WITHIN turns without one)."""
    await _turns(rng.randrange(SEND))
    if joins:
        for _ in range(JOIN_WITHIN):
            if sched.swaps.get(model_id) is not None:
                break
            await asyncio.sleep(0)
    while True:
        handle = await sched.ensure(model_id, PROXY)
        await _turns(rng.randrange(TRANSIT))
        run = fx.runs[handle.pid]
        if model_id in fx.draining or run.stopped:
            # Not taken: the proxy asks again (a wasted Ready), or it would send the request to
            # a closed port (a 502).
            sched.claimed(model_id, PROXY)
            out["asked again" if not run.stopped else "sent to a stopped run"] += 1
            if run.stopped:
                return
            continue
        fx.in_flight[model_id] += 1
        sched.claimed(model_id, PROXY)
        run.served += 1
        expected = fx.config.models[model_id].proxy
        out["ok" if run.model == model_id and handle.upstream == expected else "wrong model"] += 1
        await _turns(rng.randrange(SERVE))
        fx.in_flight[model_id] -= 1
        sched.readings_changed()  # the proxies' report of it, without the report's delay
        return


async def _ttls(sched: Scheduler[Handle], rng: random.Random, ids: tuple[str, ...], n: int) -> None:
    """`n` times, a ready model's TTL runs out (as the daemon's chore sees it: a ready model),
    and it is taken out the way its setting says, asleep or stopped."""
    for _ in range(n):
        await _turns(rng.randrange(SEND * 2))
        model_id = rng.choice(ids)
        if sched.record(model_id).state == ModelState.READY:
            await sched.idle(model_id, StopCause.TTL)


async def _interleaving(seed: int) -> tuple[Counter[str], list[str], OneProxy]:
    rng = random.Random(seed)
    ids = ("a", "b", "c")[: rng.choice((2, 3))]
    # Each model may sleep (vLLM's setting, or ComfyUI's, which serves asleep), or not.
    sleeps = {m: {"sleep": rng.choice(SLEEPS)} for m in ids if rng.random() < 0.6}
    config = make_config(*ids, **sleeps)
    fx = OneProxy(config, rng)
    clock = Clock()
    sched: Scheduler[Handle] = Scheduler(config, fx, fx, clock=clock)
    out: Counter[str] = Counter()
    if rng.random() < 0.5:  # a model ready and idle before the requests come
        warm = await sched.ensure(ids[0], PROXY)
        fx.runs[warm.pid].served += 1
        sched.claimed(ids[0], PROXY)
    step = rng.uniform(0.01, 0.05)  # seconds of the scheduler's clock per turn of the loop

    async def time_passes() -> None:
        # The clock moves on (collation's window and pauses end) and parked swaps look again.
        while True:
            await asyncio.sleep(0)
            clock.now += step
            sched.readings_changed()

    ticking = asyncio.ensure_future(time_passes())
    asks = [rng.choice(ids) for _ in range(rng.randint(2, 8))]
    timers = rng.choice((0, 0, 1, 3))  # TTLs that run out while the requests come
    try:
        await asyncio.wait_for(
            asyncio.gather(
                *(_request(sched, fx, rng, m, out, rng.random() < 0.3) for m in asks),
                _ttls(sched, rng, ids, timers),
            ),
            30,
        )
        await until(lambda: not sched.swaps.targets(), "every swap to end")
    finally:
        ticking.cancel()
        for task in sched.tasks():
            task.cancel()
    assert sum(n for what, n in out.items() if what != "asked again") == len(asks)
    return out, fx.wasted, fx


async def test_no_start_is_wasted_and_no_ready_is_lost_in_random_interleavings() -> None:
    failures = []
    deferred = woken = 0
    for seed in range(INTERLEAVINGS):
        out, wasted, fx = await _interleaving(seed)
        deferred += any(why is DeferCause.UNCLAIMED_READY for _, why in fx.deferred)
        woken += any(kind == "wake" for kind, _ in fx.log)
        if wasted or set(out) != {"ok"}:
            failures.append((seed, dict(out), wasted))
    assert not failures, f"{len(failures)} of {INTERLEAVINGS} interleavings: {failures[:5]}"
    assert deferred > 0, "no interleaving held a swap back for a Ready: the test tests nothing"
    assert woken > 0, "no interleaving woke a model: the sleep path is not tested"


async def test_b_started_for_a_request_serves_it_before_a_swap_takes_it_out() -> None:
    """`a` ready, a request for `b`, and one for `a` just after; `b`'s start outlasts collation's
    window (a ComfyUI's cold start). `b` serves its request before the swap back to `a` drains
    it, and the swap log is told why that swap waited: two swaps, not three."""
    config = make_config("a", "b")
    fx = OneProxy(config)
    clock = Clock()
    sched: Scheduler[Handle] = Scheduler(config, fx, fx, clock=clock)
    warm = await sched.ensure("a", PROXY)
    fx.runs[warm.pid].served += 1
    sched.claimed("a", PROXY)
    fx.start_gates["b"] = gate = asyncio.Event()
    to_b = asyncio.ensure_future(sched.ensure("b", PROXY))
    await fx.entered("start", "b")
    to_a = asyncio.ensure_future(sched.ensure("a", PROXY))
    await until(lambda: sched.waiting("a"), "the swap back to a to wait for b's start")
    clock.now += 60  # the swap back to a is past its collation window
    gate.set()
    handle = await asyncio.wait_for(to_b, 5)
    # Its Ready is on its way: the swap back to a waits for it, whatever it waited for before.
    await until(
        lambda: ("a", DeferCause.UNCLAIMED_READY) in fx.deferred or fx.wasted,
        "the swap back to a to be held for b's Ready",
    )
    assert not fx.runs[handle.pid].stopped and ("drain", "b") not in fx.log
    fx.in_flight["b"] += 1
    sched.claimed("b", PROXY)
    fx.runs[handle.pid].served += 1
    fx.in_flight["b"] -= 1
    sched.readings_changed()
    await asyncio.wait_for(to_a, 5)
    assert fx.wasted == []
    assert [e for e in fx.log if e[0] == "start"] == [
        ("start", "a"),
        ("start", "b"),
        ("start", "a"),
    ]


async def test_a_take_down_waits_for_the_readys_out_before_its_drain_is_told() -> None:
    """A ComfyUI-like model (its sleep setting) made ready for a request, and its TTL runs out
    before the proxy claimed that request's Ready: the drain is not told until the Ready is
    claimed (so the proxy admits the request, and the run serves it)."""
    config = make_config("a", a={"sleep": PRESETS["comfyui"]})
    fx = OneProxy(config)
    sched: Scheduler[Handle] = Scheduler(config, fx, fx, clock=Clock())
    handle = await sched.ensure("a", PROXY)  # its Ready is on its way to the proxy
    idle = asyncio.ensure_future(sched.idle("a", StopCause.TTL))
    await until(lambda: sched.record("a").state == ModelState.DRAINING, "the take-down")
    await _turns(20)
    assert ("drain", "a") not in fx.log and "a" not in fx.draining
    fx.in_flight["a"] += 1  # admitted: the proxy heard of no drain
    sched.claimed("a", PROXY)
    fx.runs[handle.pid].served += 1
    await until(lambda: ("drain", "a") in fx.log, "the drain to be told")
    assert not idle.done()  # the drain waits for the request in flight
    fx.in_flight["a"] -= 1
    await asyncio.wait_for(idle, 5)
    assert sched.record("a").state == ModelState.ASLEEP and fx.wasted == []
