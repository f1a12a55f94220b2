"""One story per swap: the scheduler tells what happens to each model as it happens (began,
ended; policy/story.py), and the daemon's swap log records those episodes as they were told,
with no state changes to read. Driven with the fake effects (no processes); the phases' durations
are the machinery's, so here the records carry none."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from swapd.daemon.config.sections.sleep_fields import PRESETS
from swapd.daemon.observe.swap_log import SwapLog
from swapd.daemon.policy.eviction.preemption import RECLAIM_PAUSE
from swapd.daemon.policy.scheduler import Scheduler
from swapd.daemon.policy.story import Began, Ended, Happening
from swapd.ipc.causes import StopCause
from swapd.ipc.swap_record import SwapKind, SwapOutcome
from tests.support.models import Clock
from tests.support.scheduler import FakeEffects, Handle, setup, until


class _Unpublished:
    def publish_nowait(self, make: Callable[[int], Any]) -> None:
        return None

    def reply(self, identity: bytes, reply: Any) -> None:
        return None


def logged(
    *ids: str, sleeping: tuple[str, ...] = ()
) -> tuple[Scheduler[Handle], FakeEffects, SwapLog, Clock]:
    """A scheduler whose story is told to a swap log as it happens, as the daemon's effects do."""
    kw = {m: {"sleep": PRESETS["vllm"]} for m in sleeping}
    sched, fx, clock = setup(*ids, **kw)
    swaps = SwapLog("inst", _Unpublished())
    told = fx.happened

    def happened(event: Happening) -> None:
        told(event)
        swaps.told(event)

    fx.happened = happened  # type: ignore[method-assign]
    return sched, fx, swaps, clock


def told_of(fx: FakeEffects, model_id: str) -> list[Happening]:
    return [e for e in fx.happenings if e.model == model_id]


def rows(swaps: SwapLog) -> list[tuple[str, str, str, str]]:
    return [(r.kind, r.model, r.result, r.cause) for r in swaps.records]


async def test_a_start_a_swap_through_a_sleep_and_a_wake_are_told_and_recorded() -> None:
    sched, fx, swaps, _ = logged("a", "b", sleeping=("a",))
    await sched.ensure("a")
    await sched.ensure("b")
    await sched.ensure("a")
    assert told_of(fx, "a") == [
        Began("a", SwapKind.START),
        Ended("a", SwapOutcome.OK),
        Began("a", SwapKind.STOP, StopCause.SWAP, "b"),
        Ended("a", SwapOutcome.OK, "swapped out for b (asleep)", SwapKind.SLEEP),
        Began("a", SwapKind.WAKE),
        Ended("a", SwapOutcome.OK),
    ]
    assert rows(swaps) == [
        ("start", "a", "ok", "request"),
        ("sleep", "a", "ok", "swap"),
        ("swap", "b", "ok", "request"),
        ("stop", "b", "ok", "swap"),
        ("wake", "a", "ok", "request"),
    ]
    _, sleep, swap, stop, wake = swaps.records
    assert (swap.evicted, swap.folded) == (("a",), (sleep.id,))
    assert (wake.evicted, wake.folded) == (("b",), (stop.id,))


async def test_a_failed_sleep_comes_to_a_stop_and_a_failed_wake_ends_its_own_record() -> None:
    sched, fx, swaps, _ = logged("a", "b", sleeping=("a",))
    await sched.ensure("a")
    fx.sleep_fails.add("a")
    await sched.ensure("b")
    # The take-down that was to be a sleep is a stop, its cause still the swap's.
    assert rows(swaps)[1:] == [("stop", "a", "ok", "swap"), ("swap", "b", "ok", "request")]
    fx.sleep_fails.clear()
    await sched.ensure("a")
    await sched.ensure("b")  # a asleep again
    fx.wake_fails.add("a")
    await sched.ensure("a")
    assert rows(swaps)[-4:] == [
        ("stop", "b", "ok", "swap"),
        ("wake", "a", "failed", "request"),
        ("stop", "a", "ok", "wake_failed"),
        ("start", "a", "ok", "request"),
    ]
    assert "wake call 1/1" in swaps.records[-3].reason


async def test_a_take_down_called_off_and_a_crash() -> None:
    sched, fx, swaps, clock = logged("a", "b")
    first = await sched.ensure("a")
    fx.drain_gates["a"] = asyncio.Event()
    to_b = asyncio.create_task(sched.ensure("b"))
    await fx.entered("drain", "a")
    assert await asyncio.wait_for(sched.ensure("a"), 1) is first
    # Taken back: a stop's record of its own, with no words, folded into no swap.
    assert told_of(fx, "a")[-1] == Ended("a", SwapOutcome.OK)
    assert rows(swaps)[-1] == ("stop", "a", "ok", "swap") and swaps.records[-1].reason == ""
    clock.now += RECLAIM_PAUSE
    await until(lambda: fx.log.count(("drain", "a")) == 2, "the second drain")
    fx.drain_gates.pop("a").set()
    b = await asyncio.wait_for(to_b, 5)
    assert rows(swaps)[-2:] == [("stop", "a", "ok", "swap"), ("swap", "b", "ok", "request")]
    assert swaps.records[-1].folded == (swaps.records[-2].id,)
    assert sched.process_exited("b", b.pid, 3)
    assert told_of(fx, "b")[-2:] == [
        Began("b", SwapKind.CRASH, StopCause.CRASH),
        Ended("b", SwapOutcome.OK, sched.record("b").reason),
    ]
    assert rows(swaps)[-1] == ("crash", "b", "ok", "crash")


async def test_a_start_called_off_by_an_unload_ends_aborted() -> None:
    sched, fx, swaps, _ = logged("a")
    fx.start_gates["a"] = asyncio.Event()
    to_a = asyncio.create_task(sched.ensure("a"))
    await fx.entered("start", "a")
    await asyncio.wait_for(sched.unload("a"), 5)
    await asyncio.gather(to_a, return_exceptions=True)
    assert rows(swaps) == [("start", "a", "aborted", "request")]
    assert swaps.records[0].reason == "start aborted: unloaded"
