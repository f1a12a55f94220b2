"""The scheduler with placement by memory (`gpus: auto`): the fake Effects of test_scheduler.py and
an in-memory placer that calls the real pure policy over one 10 GiB GPU (no NVML, no processes)."""

from __future__ import annotations

import asyncio

import msgspec

from swapd.daemon.config import Config
from swapd.daemon.policy.placement import GIB, Gpu, Request, Resident, place
from swapd.daemon.policy.scheduler import Scheduler
from tests.support.models import model
from tests.support.scheduler import FakeEffects

GPU = Gpu(id="gpu-0", index=0, total=10 * GIB)
FOOTPRINTS = {"a": 4 * GIB, "b": 4 * GIB, "c": 4 * GIB}


class MemoryPlacer:
    """What daemon/placer.py does, minus NVML: each occupant holds its footprint."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, tuple[str, ...]]] = []  # (target, occupants it was told of)

    async def plan(self, target, occupants, config):
        self.seen.append((target.id, tuple(sorted(o.model for o in occupants))))
        residents = [
            Resident(
                o.model,
                {"gpu-0": FOOTPRINTS[o.model]},
                last_use=o.started_at,
                busy=o.state != "ready",
            )
            for o in occupants
            if o.model != target.id
        ]
        return place(Request(target.id, (FOOTPRINTS[target.id],)), residents, [GPU], margin=0)


async def until(predicate, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


def auto_config() -> Config:
    return Config(models={m: model(m, gpus_auto=True) for m in FOOTPRINTS})


def test_two_that_fit_start_side_by_side_and_each_placement_sees_the_other() -> None:
    async def run() -> None:
        config = auto_config()
        effects = FakeEffects(config)
        placer = MemoryPlacer()
        scheduler = Scheduler(config, effects, placer=placer)
        gate = effects.start_gates["a"] = asyncio.Event()
        first = asyncio.create_task(scheduler.ensure("a"))
        await until(lambda: ("start", "a") in effects.log)  # a is starting, held open
        second = asyncio.create_task(scheduler.ensure("b"))
        await until(lambda: ("start", "b") in effects.log)
        gate.set()
        await asyncio.gather(first, second)
        assert effects.running == {"a", "b"} and effects.max_running == 2
        assert ("b", ("a",)) in placer.seen  # b was placed knowing a is starting there
        assert not any(kind == "stop" for kind, _ in effects.log)
        # The placement reached the start: the model was started with the GPU it chose.
        assert scheduler.record("a").model.gpus == ("gpu-0",)

    asyncio.run(run())


def test_a_third_evicts_only_the_least_recently_used() -> None:
    async def run() -> None:
        config = auto_config()
        effects = FakeEffects(config)
        clock = iter(range(100, 200))
        scheduler = Scheduler(config, effects, placer=MemoryPlacer())
        for mid in ("a", "b"):
            await scheduler.ensure(mid)
            handle = scheduler.record(mid).handle
            object.__setattr__(handle, "started_at", float(next(clock)))
        await scheduler.ensure("c")
        assert effects.running == {"b", "c"}
        assert [m for kind, m in effects.log if kind == "stop"] == ["a"]
        assert scheduler.record("a").reason == "swapped out for c"

    asyncio.run(run())


def test_a_model_that_is_not_placed_by_memory_sees_placed_ones_where_they_run() -> None:
    async def run() -> None:
        config = auto_config()
        pinned = model("pinned", gpus=("1",))
        config = msgspec.structs.replace(config, models={**config.models, "pinned": pinned})
        effects = FakeEffects(config)
        scheduler = Scheduler(config, effects, placer=MemoryPlacer(), canonical_gpus={"1": "1"})
        await scheduler.ensure("a")  # placed on gpu-0
        await scheduler.ensure("pinned")  # GPU 1: disjoint, so `a` keeps running
        assert effects.running == {"a", "pinned"}

    asyncio.run(run())
