"""The scheduler's decisions, with a fake Effects object (no processes): joins, swaps, queueing
behind drains and stops, backoff, crashes, shutdown."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from swapd.daemon.config import Config, GroupConfig, ModelConfig
from swapd.daemon.policy import names
from swapd.daemon.policy.scheduler import BACKOFF_AFTER, EnsureError
from swapd.ipc.causes import StopCause
from swapd.ipc.states import ModelState
from tests.support.scheduler import (
    Handle,
    make_config,
    parked,
    setup,
    until,
)


async def test_cold_ensure_starts_then_ready_is_served_without_effects() -> None:
    sched, fx, _ = setup("a")
    handle = await sched.ensure("a")
    assert handle.upstream.endswith("/a")
    assert fx.log == [("start", "a")]
    assert fx.states == [("a", "starting"), ("a", "ready")]
    again = await sched.ensure("a")
    assert again is handle
    assert fx.log == [("start", "a")]


async def test_concurrent_ensures_join_one_start() -> None:
    sched, fx, _ = setup("a")
    fx.start_gates["a"] = asyncio.Event()
    waiters = [asyncio.create_task(sched.ensure("a")) for _ in range(25)]
    await fx.entered("start", "a")
    fx.start_gates["a"].set()
    handles = await asyncio.gather(*waiters)
    assert len({id(h) for h in handles}) == 1
    assert fx.log == [("start", "a")]


async def test_unknown_model_is_404_and_aliases_resolve() -> None:
    sched, fx, _ = setup("a", a={"aliases": ("first",)})
    with pytest.raises(EnsureError) as err:
        await sched.ensure("zzz")
    assert err.value.status == 404
    # A name is resolved once, where the request enters the daemon; the scheduler takes ids.
    with pytest.raises(EnsureError) as err:
        await sched.ensure(names.resolve(sched.config, "zzz").id)
    assert err.value.status == 404
    await sched.ensure(names.resolve(sched.config, "first").id)
    assert fx.log == [("start", "a")]


async def test_swap_drains_and_stops_before_starting() -> None:
    sched, fx, _ = setup("a", "b")
    await sched.ensure("a")
    await sched.ensure("b")
    assert fx.log == [("start", "a"), ("drain", "a"), ("stop", "a"), ("start", "b")]
    assert sched.record("a").state == "stopped"
    assert sched.record("a").reason == "swapped out for b"
    stop = sched.record("a").stop
    assert stop is not None and (stop.cause, stop.for_model) == (StopCause.SWAP, "b")
    assert [s for m, s in fx.states if m == "a"] == [
        "starting", "ready", "draining", "stopping", "stopped",
    ]  # fmt: skip


async def test_swap_waits_for_the_drain_and_requests_for_the_draining_model_queue() -> None:
    sched, fx, clock = setup("a", "b")
    await sched.ensure("a")
    fx.drain_gates["a"] = asyncio.Event()
    to_b = asyncio.create_task(sched.ensure("b"))
    await fx.entered("drain", "a")
    assert sched.record("a").state == "draining"
    # Past the collation window, a request for the draining model is not served from it: it
    # waits its turn.
    clock.now += sched.config.models["b"].max_wait
    to_a = asyncio.create_task(sched.ensure("a"))
    assert await parked(sched, "a") == "a is being stopped"
    assert not to_b.done() and not to_a.done()
    assert ("start", "b") not in fx.log
    fx.drain_gates.pop("a").set()
    await to_b
    await to_a
    assert fx.log == [
        ("start", "a"), ("drain", "a"), ("stop", "a"), ("start", "b"),
        ("drain", "b"), ("stop", "b"), ("start", "a"),
    ]  # fmt: skip
    assert fx.max_running == 1


async def test_many_concurrent_swaps_never_run_two_models_at_once() -> None:
    sched, fx, _ = setup("a", "b", "c")
    for mid in "abc":
        fx.start_gates[mid] = asyncio.Event()
    tasks = [asyncio.create_task(sched.ensure(m)) for m in "abcabc"]
    await until(lambda: any(op == "start" for op, _ in fx.log), "the first start")
    for gate in fx.start_gates.values():
        gate.set()
    await asyncio.gather(*tasks)
    assert fx.max_running == 1
    assert len([1 for op, _ in fx.log if op == "start"]) >= 3


async def test_models_that_coexist_start_side_by_side() -> None:
    groups = {"g": GroupConfig(members=("a", "b"), swap=False, exclusive=True)}
    sched, fx, _ = setup("a", "b", groups=groups)
    fx.start_gates["a"] = asyncio.Event()
    fx.start_gates["b"] = asyncio.Event()
    ta = asyncio.create_task(sched.ensure("a"))
    tb = asyncio.create_task(sched.ensure("b"))
    await fx.entered("start", "a")
    await fx.entered("start", "b")
    # Both starts are under way at once: neither waits for the other.
    assert fx.log == [("start", "a"), ("start", "b")]
    fx.start_gates["a"].set()
    fx.start_gates["b"].set()
    await asyncio.gather(ta, tb)
    assert fx.max_running == 2


async def test_failed_start_then_backoff_then_retry_after_the_delay() -> None:
    sched, fx, clock = setup("a")
    fx.fail.add("a")
    for attempt in range(BACKOFF_AFTER):
        with pytest.raises(EnsureError) as err:
            await sched.ensure("a")
        assert err.value.status == 502
        assert err.value.log_tail == ("line 1", "line 2")
        assert sched.record("a").state == "failed"
        assert sched.record("a").failures == attempt + 1
    with pytest.raises(EnsureError) as backing:
        await sched.ensure("a")
    assert backing.value.status == 503 and backing.value.code == "backing_off"
    assert "next try in 5s" in backing.value.message
    assert "exit code 3" in backing.value.message
    assert len([1 for op, _ in fx.log if op == "start"]) == BACKOFF_AFTER

    clock.now += 5.1
    fx.fail.clear()
    await sched.ensure("a")
    assert sched.record("a").failures == 0


async def test_an_unexpected_error_in_a_start_still_answers_every_waiter() -> None:
    sched, fx, _ = setup("a")

    async def broken_start(m: ModelConfig) -> Handle:
        raise RuntimeError("bug in the machinery")

    fx.start = broken_start  # type: ignore[method-assign]
    results = await asyncio.gather(*(sched.ensure("a") for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, EnsureError) for r in results), results
    assert {r.status for r in results if isinstance(r, EnsureError)} == {502}
    assert "RuntimeError: bug in the machinery" in str(results[0])
    assert sched.record("a").state == "failed"


async def test_backoff_grows() -> None:
    sched, fx, clock = setup("a")
    fx.fail.add("a")
    waits = []
    for _ in range(BACKOFF_AFTER + 2):
        with pytest.raises(EnsureError):
            await sched.ensure("a")
        waits.append(sched.record("a").retry_at - clock.now)
        clock.now = sched.record("a").retry_at + 0.01 if sched.record("a").retry_at else clock.now
    assert waits[BACKOFF_AFTER - 1 :] == [5.0, 10.0, 20.0]


async def test_requester_cancel_does_not_cancel_the_start() -> None:
    sched, fx, _ = setup("a")
    fx.start_gates["a"] = asyncio.Event()
    waiter = asyncio.create_task(sched.ensure("a"))
    await fx.entered("start", "a")
    waiter.cancel()
    await asyncio.wait([waiter])
    assert waiter.cancelled() and ("cancel", "a") not in fx.log
    fx.start_gates["a"].set()
    await until(lambda: sched.record("a").state == "ready", "a ready")
    assert ("cancel", "a") not in fx.log


async def test_process_exit_of_a_ready_model() -> None:
    sched, fx, _ = setup("a")
    handle = await sched.ensure("a")
    assert not sched.process_exited("a", handle.pid + 1, -9), "another pid is not ours"
    assert sched.process_exited("a", handle.pid, -9)
    rec = sched.record("a")
    # Killed by a signal: the signal, by name and meaning, is the reason.
    assert rec.state == "stopped"
    assert rec.reason == (
        f"process {handle.pid} was killed by SIGKILL (killed; the kernel's out-of-memory killer "
        "sends it too)"
    )
    again = await sched.ensure("a")
    assert again.pid != handle.pid
    assert fx.log == [("start", "a"), ("stop", "a"), ("start", "a")]
    # An exit code of its own: it exited on its own.
    assert sched.process_exited("a", again.pid, 3)
    assert rec.reason == f"process {again.pid} exited on its own (exit code 3)"


async def test_unload_one_all_and_while_starting() -> None:
    sched, fx, _ = setup("a", "b", groups={"g": GroupConfig(members=("a", "b"), swap=False)})
    await sched.ensure("a")
    fx.start_gates["b"] = asyncio.Event()
    starting = asyncio.create_task(sched.ensure("b"))
    await fx.entered("start", "b")
    assert sched.record("b").state == "starting"
    assert sorted(await sched.unload(None)) == ["a", "b"]
    assert sched.loaded() == frozenset()
    with pytest.raises(EnsureError) as err:
        await starting
    assert err.value.status == 503 and err.value.code == "model_unloaded"
    with pytest.raises(EnsureError):
        await sched.unload("nope")


async def test_unload_aborts_a_start_and_answers_every_waiter_at_once() -> None:
    sched, fx, _ = setup("a")
    fx.start_gates["a"] = asyncio.Event()
    waiters = [asyncio.create_task(sched.ensure("a")) for _ in range(3)]
    await fx.entered("start", "a")
    assert await asyncio.wait_for(sched.unload("a"), 1) == ["a"]
    for waiter in waiters:
        assert waiter.done(), "an unload left an ensure hanging"
        with pytest.raises(EnsureError) as err:
            await waiter
        assert err.value.status == 503 and err.value.code == "model_unloaded"
        assert "unloaded while this request waited" in err.value.message
    assert fx.log == [("start", "a"), ("cancel", "a")]
    assert fx.running == set()
    rec = sched.record("a")
    assert rec.state == "stopped" and rec.failures == 0
    assert rec.reason == "start aborted: unloaded"
    assert rec.stop is not None and rec.stop.cause is StopCause.UNLOAD
    # The next request starts it again.
    fx.start_gates.pop("a").set()
    await sched.ensure("a")
    assert fx.log[-1] == ("start", "a") and sched.record("a").state == "ready"


async def test_a_second_unload_of_a_starting_model_waits_for_the_first() -> None:
    """The first unload takes the swap out of the queue; the second finds the model still
    starting (its start being cancelled) with no swap to join, and waits for that start to end
    rather than looking again at once (which recursed until Python gave up)."""
    sched, fx, _ = setup("a")
    fx.start_gates["a"] = asyncio.Event()
    starting = asyncio.create_task(sched.ensure("a"))
    await fx.entered("start", "a")
    first = asyncio.create_task(sched.unload("a"))
    second = asyncio.create_task(sched.unload("a"))
    assert await asyncio.wait_for(asyncio.gather(first, second), 5) == [["a"], ["a"]]
    with pytest.raises(EnsureError) as err:
        await starting
    assert err.value.code == "model_unloaded"
    assert fx.log == [("start", "a"), ("cancel", "a")]
    assert sched.record("a").state == "stopped"


async def test_unload_answers_a_request_queued_behind_a_swap() -> None:
    sched, fx, clock = setup("a", "b")
    await sched.ensure("a")
    fx.drain_gates["a"] = asyncio.Event()
    to_b = asyncio.create_task(sched.ensure("b"))
    await fx.entered("drain", "a")
    # Past collation (b's maxWait): a request for a waits for the swap.
    clock.now += sched.config.models["b"].max_wait
    to_a = asyncio.create_task(sched.ensure("a"))  # waits: a is being swapped out
    await parked(sched, "a")
    unloading = asyncio.create_task(sched.unload("a"))
    # Answered while a's drain is still held open: at once, not after the stop.
    await until(to_a.done, "the queued request's answer")
    with pytest.raises(EnsureError) as err:
        await to_a
    assert err.value.code == "model_unloaded"
    fx.drain_gates.pop("a").set()
    await unloading
    await to_b
    assert fx.log == [("start", "a"), ("drain", "a"), ("stop", "a"), ("start", "b")]


async def test_ensures_after_an_unload_wait_for_the_stop_then_start_again() -> None:
    sched, fx, _ = setup("a")
    first = await sched.ensure("a")
    fx.drain_gates["a"] = asyncio.Event()
    unloading = asyncio.create_task(sched.unload("a"))
    await fx.entered("drain", "a")
    assert sched.record("a").state == "draining"
    later = asyncio.create_task(sched.ensure("a"))
    assert await parked(sched, "a") == "a is being stopped"
    assert not later.done(), "served from a model that is being unloaded"
    fx.drain_gates.pop("a").set()
    await unloading
    again = await later
    assert again.pid != first.pid
    assert fx.log == [("start", "a"), ("drain", "a"), ("stop", "a"), ("start", "a")]


def _outdated(new: Config) -> Any:
    return lambda m: m.id not in new.models or new.models[m.id] != m


async def test_reload_aborts_an_outdated_start_and_starts_the_new_definition() -> None:
    sched, fx, _ = setup("a", "b")
    fx.start_gates["a"] = asyncio.Event()
    waiters = [asyncio.create_task(sched.ensure("a")) for _ in range(2)]
    await fx.entered("start", "a")
    new = make_config("a", "b", a={"env": {"NEW": "1"}})
    assert await sched.reconfigure(new, [], _outdated(new)) == ["a"]
    await until(lambda: fx.log.count(("start", "a")) == 2, "the second start")
    assert fx.log == [("start", "a"), ("cancel", "a"), ("start", "a")]
    assert not any(w.done() for w in waiters)
    fx.start_gates.pop("a").set()
    handles = await asyncio.gather(*waiters)
    assert handles[0] is handles[1]
    assert sched.record("a").model is new.models["a"]
    # An unchanged start is left alone.
    fx.start_gates["b"] = asyncio.Event()
    to_b = asyncio.create_task(sched.ensure("b"))
    await fx.entered("start", "b")
    assert await sched.reconfigure(new, [], _outdated(new)) == []
    fx.start_gates.pop("b").set()
    await to_b
    assert ("cancel", "b") not in fx.log


async def test_reload_that_removes_a_starting_model_answers_404() -> None:
    sched, fx, _ = setup("a", "b")
    fx.start_gates["a"] = asyncio.Event()
    waiter = asyncio.create_task(sched.ensure("a"))
    await fx.entered("start", "a")
    new = make_config("b")
    await sched.reconfigure(new, [], _outdated(new))
    with pytest.raises(EnsureError) as err:
        await asyncio.wait_for(waiter, 1)
    assert err.value.status == 404
    assert fx.log == [("start", "a"), ("cancel", "a")] and fx.running == set()


async def test_shutdown_answers_waiters_and_abort_starts_stops_the_start() -> None:
    sched, fx, _ = setup("a")
    fx.start_gates["a"] = asyncio.Event()
    waiter = asyncio.create_task(sched.ensure("a"))
    await fx.entered("start", "a")
    await sched.shutdown()
    with pytest.raises(EnsureError) as err:
        await waiter
    assert err.value.code == "shutting_down"
    assert fx.log == [("start", "a")], "shutdown alone leaves the start to the next daemon"
    assert await sched.abort_starts() == ["a"]
    assert fx.log == [("start", "a"), ("cancel", "a")] and fx.running == set()


async def test_ensures_join_a_process_being_adopted_and_a_failed_one_starts_afresh() -> None:
    """After a daemon restart, a process found starting is waited for (reconcile.py); the Ensures
    the proxies send again must join that wait, not start a second process on its port."""
    sched, fx, _ = setup("a", "b", groups={"g": GroupConfig(members=("a", "b"), swap=False)})
    healthy = asyncio.Event()

    async def becomes_healthy() -> Handle:
        await healthy.wait()
        return Handle("http://adopted", 7)

    sched.adopt_when_healthy(sched.config.models["a"], becomes_healthy())
    waiter = asyncio.create_task(sched.ensure("a"))
    await until(lambda: sched.record("a").state is ModelState.STARTING, "the adoption")
    assert not waiter.done()
    healthy.set()
    assert (await waiter).pid == 7
    assert sched.record("a").reason == "adopted"

    async def never_healthy() -> None:
        return None

    sched.adopt_when_healthy(sched.config.models["b"], never_healthy())
    assert (await sched.ensure("b")).pid != 7
    assert fx.log == [("start", "b")]


async def test_shutdown_refuses_ensures() -> None:
    sched, _, _ = setup("a")
    await sched.shutdown()
    with pytest.raises(EnsureError) as err:
        await sched.ensure("a")
    assert err.value.status == 503 and "shutting down" in err.value.message


async def test_a_stop_is_told_whether_a_start_follows() -> None:
    sched, fx, _ = setup("a", "b")
    await sched.ensure("a")
    await sched.ensure("b")  # swaps a out to start b
    await sched.unload("b")  # nothing starts after
    assert fx.told == [("a", True), ("b", False)]
