"""Sleep and wake in the scheduler, with the fake Effects (no processes): a swap that must free a
model with a sleep setting puts it to sleep, a request for it wakes it with its process kept, a
failed sleep or wake falls back to a stop (and a cold start), a request that comes while it
falls asleep waits and is served, the TTL puts it to sleep, the policies of sets do not count an
asleep model, and placement by memory counts what it still holds."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

import pytest

from swapd.daemon.config import Config, ModelConfig
from swapd.daemon.config.sections.sleep_fields import PRESETS
from swapd.daemon.errors import EnsureError
from swapd.daemon.policy.eviction.choose import choose
from swapd.daemon.policy.eviction.contract import GpuRoom, MakeRoom, Occupant
from swapd.daemon.policy.eviction.memory_fit import GIB, Gpu
from swapd.daemon.policy.scheduler import Scheduler
from swapd.ipc.causes import StopCause
from swapd.ipc.states import ModelState
from tests.support.models import model
from tests.support.scheduler import FakeEffects, Handle, parked, setup, until

VLLM = PRESETS["vllm"]


def sleepy(*ids: str, sleeping: tuple[str, ...] = ("a",)) -> dict[str, dict[str, object]]:
    """`setup`'s keyword arguments: the models in `sleeping` have vLLM's sleep setting."""
    return {m: {"sleep": VLLM} for m in ids if m in sleeping}


def states(fx: FakeEffects, mid: str) -> list[str]:
    return [state for m, state in fx.states if m == mid]


async def test_a_swap_puts_a_sleep_capable_model_to_sleep_and_a_request_wakes_it() -> None:
    sched, fx, _ = setup("a", "b", **sleepy("a", "b"))
    first = await sched.ensure("a")
    await sched.ensure("b")
    assert fx.log == [("start", "a"), ("drain", "a"), ("sleep", "a"), ("start", "b")]
    assert states(fx, "a") == ["starting", "ready", "draining", "sleeping", "asleep"]
    rec = sched.record("a")
    assert rec.handle is first and rec.stop is not None and rec.stop.cause is StopCause.SWAP
    assert rec.reason == "swapped out for b (asleep)"
    again = await sched.ensure("a")
    # Woken, not started: the same process (pid), and b stopped (it has no sleep setting).
    assert again is first and again.pid == first.pid
    assert fx.log[4:] == [("drain", "b"), ("stop", "b"), ("wake", "a")]
    assert states(fx, "a")[-2:] == ["waking", "ready"]
    assert fx.running == {"a"} and fx.asleep == set()


async def test_a_sleep_that_fails_stops_the_model_instead() -> None:
    sched, fx, _ = setup("a", "b", **sleepy("a", "b"))
    await sched.ensure("a")
    fx.sleep_fails.add("a")
    await sched.ensure("b")
    assert fx.log == [("start", "a"), ("drain", "a"), ("sleep", "a"), ("stop", "a"), ("start", "b")]
    assert states(fx, "a")[-3:] == ["sleeping", "stopping", "stopped"]
    rec = sched.record("a")
    assert rec.handle is None and rec.stop is not None
    assert rec.stop.cause is StopCause.SLEEP_FAILED
    assert "answered 500" in rec.reason
    # The next request for it starts it cold.
    await sched.ensure("a")
    assert fx.log[-1] == ("start", "a")


async def test_a_wake_that_fails_stops_the_model_and_starts_it_cold() -> None:
    sched, fx, _ = setup("a", "b", **sleepy("a", "b"))
    first = await sched.ensure("a")
    await sched.ensure("b")
    fx.wake_fails.add("a")
    again = await sched.ensure("a")
    assert fx.log[-3:] == [("wake", "a"), ("stop", "a"), ("start", "a")]
    assert again.pid != first.pid
    assert states(fx, "a")[-5:] == ["waking", "stopping", "stopped", "starting", "ready"]
    stop = [s for m, s in fx.told if m == "a"]
    assert stop == [True]  # its stop knew a start follows (the watcher's removal waits for it)


async def test_a_request_while_it_falls_asleep_waits_and_is_then_served_awake() -> None:
    sched, fx, _ = setup("a", "b", **sleepy("a", "b"))
    first = await sched.ensure("a")
    gate = fx.sleep_gates["a"] = asyncio.Event()
    to_b = asyncio.create_task(sched.ensure("b"))
    await fx.entered("sleep", "a")
    assert sched.record("a").state == ModelState.SLEEPING
    to_a = asyncio.create_task(sched.ensure("a"))
    assert "a is being stopped" in await parked(sched, "a")
    gate.set()
    await to_b
    served = await to_a
    assert served is first  # woken, the same process
    assert fx.log == [
        ("start", "a"),
        ("drain", "a"),
        ("sleep", "a"),
        ("start", "b"),
        ("drain", "b"),
        ("stop", "b"),
        ("wake", "a"),
    ]


async def test_sleep_on_request_and_its_refusals() -> None:
    sched, fx, _ = setup("a", "b", **sleepy("a", "b"))
    with pytest.raises(EnsureError) as err:
        await sched.sleep("a")
    assert (err.value.status, err.value.code) == (409, "model_not_loaded")
    await sched.ensure("a")
    assert await sched.sleep("a") == ModelState.ASLEEP
    assert sched.record("a").reason == "asked to sleep"
    assert await sched.sleep("a") == ModelState.ASLEEP  # already asleep: nothing more
    assert [k for k, m in fx.log if m == "a"] == ["start", "drain", "sleep"]
    await sched.ensure("b")
    with pytest.raises(EnsureError) as err:
        await sched.sleep("b")
    assert (err.value.status, err.value.code) == (400, "cannot_sleep")


async def test_the_ttl_puts_it_to_sleep_and_an_unload_stops_it_asleep() -> None:
    sched, fx, _ = setup("a", "b", **sleepy("a", "b"))
    await sched.ensure("a")
    await sched.idle("a", StopCause.TTL)
    assert sched.record("a").state == ModelState.ASLEEP
    assert sched.record("a").reason == "ttl expired (asleep)"
    # Asleep, it is still loaded: an unload of everything stops it, without a drain.
    assert await sched.unload(None) == ["a"]
    assert fx.log[-1] == ("stop", "a") and ("drain", "a") not in fx.log[3:]
    assert sched.record("a").state == ModelState.STOPPED
    # Without a sleep setting, the TTL stops it.
    await sched.ensure("b")
    await sched.idle("b", StopCause.TTL)
    assert sched.record("b").state == ModelState.STOPPED


async def test_the_set_policies_do_not_count_an_asleep_model() -> None:
    sched, fx, _ = setup("a", "b", "c", **sleepy("a", "b", "c", sleeping=("a", "b", "c")))
    await sched.ensure("a")
    await sched.ensure("b")  # a asleep
    await sched.ensure("c")  # b asleep; a, holding no room a set policy counts, untouched
    assert [k for k, m in fx.log if m == "a"] == ["start", "drain", "sleep"]
    assert sched.record("a").state == sched.record("b").state == ModelState.ASLEEP
    decided = [d for target, d in fx.decisions if target == "c"]
    assert isinstance(decided[-1], MakeRoom) and decided[-1].sleep == {"b"}


async def test_a_crash_while_asleep_stops_it_and_the_next_request_starts_it() -> None:
    sched, fx, _ = setup("a", "b", **sleepy("a", "b"))
    first = await sched.ensure("a")
    await sched.ensure("b")
    assert sched.process_exited("a", first.pid, 9)
    assert sched.record("a").state == ModelState.STOPPED
    assert sched.record("a").stop is not None
    await until(lambda: not sched.stops_under_way(), "the cleanup to end")
    again = await sched.ensure("a")
    assert again.pid != first.pid and ("wake", "a") not in fx.log


# ------------------------------------------------------------------------ placement by memory

GPU = Gpu(id="gpu-0", index=0, total=80 * GIB)


class Reading:
    """The GPU as NVML would read it: an awake occupant holds its footprint, an asleep one its
    residual (the test says how much)."""

    def __init__(self, fx: FakeEffects, footprint: dict[str, int], residual: int) -> None:
        self.fx = fx
        self.footprint = footprint
        self.residual = residual

    def __call__(self, target: ModelConfig, occupants: Sequence[Occupant]) -> GpuRoom:
        used = {
            o.id: {"gpu-0": self.residual if o.id in self.fx.asleep else self.footprint[o.id]}
            for o in occupants
        }
        return GpuRoom(gpus=(GPU,), used=used, reserved={}, need=(self.footprint[target.id],))


def memory_setup(residual: int) -> tuple[Scheduler[Handle], FakeEffects]:
    config = Config(
        models={
            "a": model("a", gpus_auto=True, sleep=VLLM),
            "b": model("b", gpus_auto=True),
        },
        vram_margin=0,
    )
    fx = FakeEffects(config)
    fx.gpu_room = Reading(fx, {"a": 60 * GIB, "b": 50 * GIB}, residual)
    policies = functools.partial(choose, by_memory=True)
    return Scheduler(config, fx, fx, choose_policy=policies), fx


async def test_placement_counts_an_asleep_models_residual_and_keeps_it_asleep() -> None:
    sched, fx = memory_setup(residual=1 * GIB)
    first = await sched.ensure("a")
    await sched.ensure("b")
    # a slept; decided again with a at its residual (1 GiB): b fits beside it.
    assert fx.log == [("start", "a"), ("drain", "a"), ("sleep", "a"), ("start", "b")]
    assert sched.record("a").state == ModelState.ASLEEP
    assert sum(1 for target, _ in fx.readings_seen if target == "b") == 2
    # Woken on the GPU it sleeps on: its residual counted as its own, b evicted for its need.
    again = await sched.ensure("a")
    assert again is first and fx.log[-3:] == [("drain", "b"), ("stop", "b"), ("wake", "a")]
    target, read = fx.readings_seen[-1]
    assert target == "a" and "a" in read  # the reading attributes its residual to it


async def test_an_asleep_model_whose_residual_leaves_no_room_is_stopped() -> None:
    sched, fx = memory_setup(residual=40 * GIB)
    await sched.ensure("a")
    await sched.ensure("b")
    # Asleep, a still held 40 GiB: 40 + 50 > 80, so the second decision stopped it.
    assert fx.log == [
        ("start", "a"),
        ("drain", "a"),
        ("sleep", "a"),
        ("stop", "a"),
        ("start", "b"),
    ]
    assert sched.record("a").state == ModelState.STOPPED
    assert sched.record("a").reason == "swapped out for b"


async def test_a_reload_that_changes_a_waking_model_wakes_nothing_and_starts_it_anew() -> None:
    sched, fx, _ = setup("a", "b", **sleepy("a", "b"))
    first = await sched.ensure("a")
    await sched.ensure("b")
    fx.wake_gates["a"] = asyncio.Event()
    waking = asyncio.create_task(sched.ensure("a"))
    await fx.entered("wake", "a")
    changed = Config(
        models={
            "a": model("a", sleep=VLLM, cmd=("server", "a", "--new")),
            "b": sched.config.models["b"],
        }
    )
    restarted = await sched.reconfigure(changed, ["a"], lambda m: m.cmd != changed.models[m.id].cmd)
    assert restarted == ["a"]
    again = await waking  # the same request, served by the new definition
    assert again.pid != first.pid
    assert fx.log[-3:] == [("wake", "a"), ("cancel", "a"), ("start", "a")]
    assert sched.record("a").state == ModelState.READY
    assert sched.record("a").model is not None and sched.record("a").model.cmd[-1] == "--new"
