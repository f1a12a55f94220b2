"""The scheduler's queue, with the fake Effects of test_scheduler.py (no processes): collation (a
request for a model that a queued swap would stop is served from it: A A B, not A B A), its bound
(after `collate_window` the swap goes first), and priorities (higher first, FIFO within one)."""

from __future__ import annotations

import asyncio

from swapd.daemon.config import Config
from swapd.daemon.policy.eviction.preemption import RECLAIM_PAUSE
from swapd.daemon.policy.scheduler import Scheduler
from swapd.ipc.causes import StopCause
from tests.support.models import Clock
from tests.support.scheduler import FakeEffects, Handle, make_config, parked, until


def build(config: Config) -> tuple[Scheduler[Handle], FakeEffects, Clock]:
    effects = FakeEffects(config)
    clock = Clock()
    return Scheduler(config, effects, effects, clock=clock), effects, clock


async def test_a_busy_model_serves_its_requests_before_a_queued_swap() -> None:
    sched, fx, _ = build(make_config("a", "b"))
    first = await sched.ensure("a")
    fx.busy_models.add("a")  # a request to a is in flight
    to_b = asyncio.create_task(sched.ensure("b"))
    assert "collation" in await parked(sched, "b")
    assert ("drain", "a") not in fx.log, "a busy model was preempted"
    # The second request for a is served by a, without a swap (A A B).
    assert await asyncio.wait_for(sched.ensure("a"), 1) is first
    fx.busy_models.clear()
    await asyncio.wait_for(to_b, 5)
    assert fx.log == [("start", "a"), ("drain", "a"), ("stop", "a"), ("start", "b")]


async def test_a_request_for_a_draining_model_takes_it_back() -> None:
    sched, fx, clock = build(make_config("a", "b"))
    first = await sched.ensure("a")
    fx.drain_gates["a"] = asyncio.Event()
    to_b = asyncio.create_task(sched.ensure("b"))
    await fx.entered("drain", "a")
    assert sched.record("a").state == "draining"
    again = await asyncio.wait_for(sched.ensure("a"), 1)
    assert again is first and sched.record("a").state == "ready"
    assert not to_b.done()
    # The swap drains a again once the proxies' reports had time to show that request.
    clock.now += RECLAIM_PAUSE
    await until(lambda: fx.log.count(("drain", "a")) == 2, "the second drain")
    fx.drain_gates.pop("a").set()
    await asyncio.wait_for(to_b, 5)
    assert fx.log == [
        ("start", "a"), ("drain", "a"), ("drain", "a"), ("stop", "a"), ("start", "b"),
    ]  # fmt: skip
    assert fx.max_running == 1


async def test_a_request_just_after_the_drain_ended_waits_for_the_stop() -> None:
    """The drain is over (every proxy acked) but its stop has not begun: too late to take the
    model back. The request queues behind the stop and gets the model started again, never the
    handle of a process being stopped (found under a parallel test run: the stop went on, and
    the next start found the old process's port still in use)."""
    sched, fx, _ = build(make_config("a", "b"))
    await sched.ensure("a")
    late: list[asyncio.Task[object]] = []
    # Queued by the drain's last step: it runs after the drain is done, before its stop resumes.
    fx.drain_hooks["a"] = lambda: late.append(asyncio.ensure_future(sched.ensure("a")))
    to_b = asyncio.create_task(sched.ensure("b"))
    await until(lambda: bool(late) and late[0].done(), "the late request's answer", 10)
    await asyncio.wait_for(to_b, 5)
    handle = late[0].result()
    assert sched.record("a").state == "ready" and sched.record("a").handle is handle
    assert "a" in fx.running
    assert fx.log == [
        ("start", "a"), ("drain", "a"), ("stop", "a"), ("start", "b"),
        ("drain", "b"), ("stop", "b"), ("start", "a"),
    ]  # fmt: skip
    assert fx.max_running == 1


async def test_starvation_is_bounded_by_the_collation_window() -> None:
    sched, fx, clock = build(make_config("a", "b"))
    await sched.ensure("a")
    fx.busy_models.add("a")  # a never goes idle
    fx.drain_gates["a"] = asyncio.Event()
    to_b = asyncio.create_task(sched.ensure("b"))
    assert "collation" in await parked(sched, "b")
    assert ("drain", "a") not in fx.log
    # The swap's window (b's maxWait) is over: it drains a, busy or not.
    clock.now += sched.config.models["b"].max_wait
    await until(lambda: sched.record("a").state == "draining", "the drain of a")
    late_a = asyncio.create_task(sched.ensure("a"))
    assert await parked(sched, "a") == "a is being stopped"
    assert not late_a.done(), "a request after the window overtook the queued swap"
    fx.busy_models.clear()
    fx.drain_gates.pop("a").set()
    await asyncio.wait_for(to_b, 5)
    await asyncio.wait_for(late_a, 5)
    assert [m for kind, m in fx.log if kind == "start"] == ["a", "b", "a"]


async def _order(priority: dict[str, int]) -> list[str]:
    config = make_config("a", "b", "c", "d")
    config = Config(models=config.models, priority=priority)
    sched, fx, _ = build(config)
    await sched.ensure("a")
    fx.drain_gates["a"] = asyncio.Event()
    to_d = asyncio.create_task(sched.ensure("d"))
    await fx.entered("drain", "a")
    # b, then c, queue behind the swap to d.
    to_b = asyncio.create_task(sched.ensure("b"))
    await parked(sched, "b")
    to_c = asyncio.create_task(sched.ensure("c"))
    await parked(sched, "c")
    fx.drain_gates.pop("a").set()
    await asyncio.wait_for(asyncio.gather(to_d, to_b, to_c), 5)
    return [m for kind, m in fx.log if kind == "start"]


async def test_queued_swaps_go_in_arrival_order_within_a_priority() -> None:
    assert await _order({}) == ["a", "d", "b", "c"]


async def test_a_higher_priority_goes_first() -> None:
    assert await _order({"c": 5}) == ["a", "d", "c", "b"]
    assert await _order({"b": 1, "c": -1}) == ["a", "d", "b", "c"]


async def test_a_stop_someone_else_also_wants_is_not_taken_back() -> None:
    sched, fx, _ = build(make_config("a", "b"))
    await sched.ensure("a")
    fx.drain_gates["a"] = asyncio.Event()
    to_b = asyncio.create_task(sched.ensure("b"))
    await fx.entered("drain", "a")
    reload_stop = asyncio.create_task(sched.stop("a", StopCause.RELOAD))  # joins the swap's stop
    await until(lambda: not sched.stops.collatable("a"), "the reload's stop to join the swap's")
    to_a = asyncio.create_task(sched.ensure("a"))
    assert await parked(sched, "a") == "a is being stopped"
    assert not to_a.done() and sched.record("a").state == "draining"
    fx.drain_gates.pop("a").set()
    await asyncio.wait_for(asyncio.gather(to_b, reload_stop, to_a), 5)
    assert [m for kind, m in fx.log if kind == "start"] == ["a", "b", "a"]
