"""Collation weighed by what a swap costs (docs/swapping.md, "Collation and what a swap costs"),
with the fake Effects and Readings: a swap serves a loaded model's queue first for at most its
target's `maxWait` (per model, else the top level's), never longer (no starvation); among swaps
that conflict the cheaper swap-in goes first until the dearer one waited its `maxWait`;
priorities come before both; a swap nobody waits for (a load without `wait`) takes out no model
in use; and the swap says why it waits, as a type."""

from __future__ import annotations

import asyncio

import msgspec

from swapd.daemon.config import Config
from swapd.daemon.policy.records import Parked
from swapd.daemon.policy.scheduler import Scheduler
from swapd.ipc.causes import WaitCause
from tests.support.models import Clock
from tests.support.scheduler import FakeEffects, Handle, make_config, parked, until


def build(config: Config) -> tuple[Scheduler[Handle], FakeEffects, Clock]:
    effects = FakeEffects(config)
    clock = Clock()
    return Scheduler(config, effects, effects, clock=clock), effects, clock


def starts(fx: FakeEffects) -> list[str]:
    return [m for kind, m in fx.log if kind == "start"]


async def test_a_swap_serves_the_loaded_queue_first_for_its_own_max_wait() -> None:
    sched, fx, clock = build(make_config("a", "b", b={"max_wait": 2.0}))
    first = await sched.ensure("a")
    fx.busy_models.add("a")
    queued_at = clock.now
    to_b = asyncio.create_task(sched.ensure("b"))
    await parked(sched, "b")
    # Why, as a type: a's queue first, and until when at the latest.
    assert fx.parks[-1] == ("b", Parked(WaitCause.COLLATION, ("a",), queued_at + 2.0))
    # A A B: the requests for a that come meanwhile are a's, no swap.
    assert await asyncio.wait_for(sched.ensure("a"), 1) is first
    clock.now += 1.9
    await parked(sched, "b")
    assert ("drain", "a") not in fx.log, "b's swap went before its maxWait was over"
    clock.now += 0.1  # b's maxWait is over: a is swapped out though still busy
    await asyncio.wait_for(to_b, 5)
    assert starts(fx) == ["a", "b"]


async def test_a_model_with_no_max_wait_does_not_wait_for_a_busy_one() -> None:
    sched, fx, _ = build(make_config("a", "b", b={"max_wait": 0.0}))
    await sched.ensure("a")
    fx.busy_models.add("a")
    await asyncio.wait_for(sched.ensure("b"), 5)
    assert starts(fx) == ["a", "b"]
    assert not any(p.cause is WaitCause.COLLATION for _, p in fx.parks)


async def test_steady_traffic_for_the_loaded_model_does_not_starve_a_swap() -> None:
    """a is never idle: b's swap still goes once its maxWait is over, and a request for a that
    comes after that waits behind it (maxWait plus b's own swap-in, not more)."""
    sched, fx, clock = build(make_config("a", "b", b={"max_wait": 3.0}))
    await sched.ensure("a")
    fx.busy_models.add("a")
    fx.drain_gates["a"] = asyncio.Event()
    to_b = asyncio.create_task(sched.ensure("b"))
    await parked(sched, "b")
    for _ in range(3):
        clock.now += 1.0
        await sched.ensure("a")  # served by a, busy as ever
    await until(lambda: sched.record("a").state == "draining", "b's swap to drain a")
    late_a = asyncio.create_task(sched.ensure("a"))
    await parked(sched, "a")
    assert not late_a.done(), "a request after b's maxWait overtook b's swap"
    fx.busy_models.clear()
    fx.drain_gates.pop("a").set()
    await asyncio.wait_for(asyncio.gather(to_b, late_a), 5)
    assert starts(fx) == ["a", "b", "a"]


async def _order(
    costs: dict[str, float], priority: dict[str, int] | None = None, waited: float = 0.0
) -> list[str]:
    """b, then c, queue behind a swap to d (each needs d out); the order they start in."""
    config = make_config("a", "b", "c", "d")
    config = msgspec.structs.replace(config, priority=priority or {})
    sched, fx, clock = build(config)
    fx.load_costs.update(costs)
    await sched.ensure("a")
    fx.drain_gates["a"] = asyncio.Event()
    to_d = asyncio.create_task(sched.ensure("d"))
    await fx.entered("drain", "a")
    to_b = asyncio.create_task(sched.ensure("b"))
    await parked(sched, "b")
    to_c = asyncio.create_task(sched.ensure("c"))
    await parked(sched, "c")
    clock.now += waited
    fx.drain_gates.pop("a").set()
    await asyncio.wait_for(asyncio.gather(to_d, to_b, to_c), 5)
    return starts(fx)[2:]


async def test_the_cheaper_swap_in_goes_first() -> None:
    assert await _order({"b": 10.0, "c": 0.2}) == ["c", "b"]
    assert await _order({"b": 0.2, "c": 10.0}) == ["b", "c"]
    # A model never loaded (its cost unknown) after one whose cost is known.
    assert await _order({"c": 10.0}) == ["c", "b"]
    # None known: arrival order, as always.
    assert await _order({}) == ["b", "c"]


async def test_a_swap_past_its_max_wait_is_not_overtaken_by_a_cheaper_one() -> None:
    assert await _order({"b": 10.0, "c": 0.2}, waited=5.0) == ["b", "c"]


async def test_priorities_keep_their_meaning() -> None:
    assert await _order({"b": 10.0, "c": 0.2}, priority={"b": 1}) == ["b", "c"]
    assert await _order({"b": 0.2, "c": 10.0}, priority={"c": 1}) == ["c", "b"]


async def test_a_wake_is_weighed_by_its_wake_time() -> None:
    """An asleep model's cost is its wake's, not its cold start's."""
    sleep = {"sleep": "vllm"}
    config = make_config("a", "b", "c", "d", b=sleep)
    sched, fx, _ = build(config)
    fx.load_costs.update({"b": 10.0, "c": 1.0})
    fx.wake_costs["b"] = 0.05
    await sched.ensure("b")
    await sched.ensure("a")  # b is put to sleep for a
    await until(lambda: sched.record("b").state == "asleep", "b asleep")
    fx.drain_gates["a"] = asyncio.Event()
    to_d = asyncio.create_task(sched.ensure("d"))
    await fx.entered("drain", "a")
    to_c = asyncio.create_task(sched.ensure("c"))
    await parked(sched, "c")
    to_b = asyncio.create_task(sched.ensure("b"))
    await parked(sched, "b")
    fx.drain_gates.pop("a").set()
    await asyncio.wait_for(asyncio.gather(to_d, to_b, to_c), 5)
    woken = [m for kind, m in fx.log if kind in ("start", "wake")]
    assert woken[-2:] == ["b", "c"], fx.log


async def test_a_load_nobody_waits_for_takes_out_no_model_in_use() -> None:
    sched, fx, clock = build(make_config("a", "b"))
    await sched.ensure("a")
    fx.busy_models.add("a")
    load = asyncio.create_task(sched.ensure("b", waits=False))
    await parked(sched, "b")
    clock.now += 60.0  # far past b's maxWait: still not
    await until(lambda: any(p.cause is WaitCause.UNWATCHED for _, p in fx.parks), "b to yield to a")
    seen = len(fx.parks)
    await until(lambda: len(fx.parks) >= seen + 3, "three more of b's decisions")
    assert starts(fx) == ["a"] and not load.done()
    assert fx.parks[-1] == ("b", Parked(WaitCause.UNWATCHED, ("a",)))
    # Once a is idle it goes.
    fx.busy_models.clear()
    await asyncio.wait_for(load, 5)
    assert starts(fx) == ["a", "b"]


async def test_a_load_nobody_waits_for_becomes_a_swap_once_someone_waits() -> None:
    sched, fx, clock = build(make_config("a", "b"))
    await sched.ensure("a")
    fx.busy_models.add("a")
    load = asyncio.create_task(sched.ensure("b", waits=False))
    await parked(sched, "b")
    clock.now += sched.config.models["b"].max_wait  # past collation: only its yielding holds it
    await until(lambda: any(p.cause is WaitCause.UNWATCHED for _, p in fx.parks), "b to yield to a")
    assert starts(fx) == ["a"]
    wanted = asyncio.create_task(sched.ensure("b"))  # a request waits for b now
    # Its own maxWait, from now: the time nobody waited for the swap does not count.
    await until(lambda: fx.parks[-1][1].cause is WaitCause.COLLATION, "b to serve a's queue")
    assert starts(fx) == ["a"]
    clock.now += sched.config.models["b"].max_wait
    await asyncio.wait_for(asyncio.gather(load, wanted), 5)
    assert starts(fx) == ["a", "b"]


async def test_a_request_that_gave_up_leaves_a_swap_nobody_waits_for() -> None:
    sched, fx, clock = build(make_config("a", "b"))
    await sched.ensure("a")
    fx.busy_models.add("a")
    asked = asyncio.create_task(sched.ensure("b"))
    await parked(sched, "b")
    asked.cancel()  # its client went away (the daemon's `GaveUp`)
    clock.now += sched.config.models["b"].max_wait
    await until(lambda: any(p.cause is WaitCause.UNWATCHED for _, p in fx.parks), "b to yield to a")
    assert starts(fx) == ["a"]
    fx.busy_models.clear()
    await until(lambda: sched.record("b").state == "ready", "b loaded once a is idle")


async def test_requests_that_each_give_up_never_make_their_swap_overdue() -> None:
    """The thrash lever (docs/swapping.md, "No one client thrashes the GPU"): a client asks for b
    and leaves, again and again, past b's maxWait. Each request serves a's queue for its own
    maxWait (the time nobody waited does not count), so the swap it left behind never becomes
    overdue and takes out no model in use."""
    sched, fx, clock = build(make_config("a", "b"))
    await sched.ensure("a")
    fx.busy_models.add("a")
    max_wait = sched.config.models["b"].max_wait
    for _ in range(4):
        asked = asyncio.create_task(sched.ensure("b"))
        await until(
            lambda: (
                fx.parks
                and fx.parks[-1] == ("b", Parked(WaitCause.COLLATION, ("a",), clock.now + max_wait))
            ),
            "b to serve a's queue for its own maxWait",
        )
        asked.cancel()  # its client went away (the daemon's `GaveUp`)
        clock.now += max_wait
        await until(lambda: fx.parks[-1][1].cause is WaitCause.UNWATCHED, "b to yield to a")
    assert starts(fx) == ["a"]
    fx.busy_models.clear()  # once a is idle, the swap nobody waits for goes
    await until(lambda: sched.record("b").state == "ready", "b loaded once a is idle")
    assert starts(fx) == ["a", "b"]
