"""The scheduler with placement by memory (`gpus: auto`): the fake Effects of test_scheduler.py,
whose GPU reading is one 10 GiB GPU on which every occupant holds its footprint, and the real
eviction policy (no NVML, no processes); and a slow GPU reading, through the daemon's own
readings and GPU ledger over the fake backend, that holds up no other swap."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Sequence
from pathlib import Path

import msgspec

from swapd.daemon.busy_checks import BusyChecks
from swapd.daemon.config import Config, ModelConfig
from swapd.daemon.gpu_ledger import GpuLedger
from swapd.daemon.machinery.footprints import Footprints
from swapd.daemon.machinery.gpu_fake import FakeBackend, fake_uuid
from swapd.daemon.policy.eviction.choose import choose
from swapd.daemon.policy.eviction.contract import GpuRoom, Occupant
from swapd.daemon.policy.eviction.memory_fit import GIB, Gpu
from swapd.daemon.policy.proxies import ProxyRegistry
from swapd.daemon.policy.scheduler import Scheduler
from swapd.daemon.readings import DaemonReadings
from swapd.ipc.model_status import GpuInfo
from tests.support.models import model
from tests.support.scheduler import FakeEffects, Handle, until

GPU = Gpu(id="gpu-0", index=0, total=10 * GIB)
FOOTPRINTS = {"a": 4 * GIB, "b": 4 * GIB, "c": 4 * GIB}


class MemoryReading:
    """What the GPU ledger reads, minus NVML: each occupant holds its footprint."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, tuple[str, ...]]] = []  # (target, occupants it was told of)

    def __call__(self, target: ModelConfig, occupants: Sequence[Occupant]) -> GpuRoom:
        self.seen.append((target.id, tuple(sorted(o.id for o in occupants))))
        used = {o.id: {"gpu-0": FOOTPRINTS[o.id]} for o in occupants if o.id in FOOTPRINTS}
        return GpuRoom(gpus=(GPU,), used=used, reserved={}, need=(FOOTPRINTS[target.id],))


def scheduler(
    config: Config, effects: FakeEffects, **kw: object
) -> tuple[Scheduler[Handle], MemoryReading]:
    reading = MemoryReading()
    effects.gpu_room = reading
    policies = functools.partial(choose, by_memory=True, **kw)  # type: ignore[arg-type]
    return Scheduler(config, effects, effects, choose_policy=policies), reading


def auto_config() -> Config:
    return Config(models={m: model(m, gpus_auto=True) for m in FOOTPRINTS}, vram_margin=0)


def test_two_that_fit_start_side_by_side_and_each_placement_sees_the_other() -> None:
    async def run() -> None:
        config = auto_config()
        effects = FakeEffects(config)
        sched, placer = scheduler(config, effects)
        gate = effects.start_gates["a"] = asyncio.Event()
        first = asyncio.create_task(sched.ensure("a"))
        await until(lambda: ("start", "a") in effects.log, "a to start")  # held open
        second = asyncio.create_task(sched.ensure("b"))
        await until(lambda: ("start", "b") in effects.log, "b to start")
        gate.set()
        await asyncio.gather(first, second)
        assert effects.running == {"a", "b"} and effects.max_running == 2
        assert ("b", ("a",)) in placer.seen  # b was placed knowing a is starting there
        assert not any(kind == "stop" for kind, _ in effects.log)
        # The placement reached the start: the model was started with the GPU it chose.
        placed = sched.record("a").model
        assert placed is not None and placed.gpus == ("gpu-0",)

    asyncio.run(run())


def test_a_third_evicts_only_the_least_recently_used() -> None:
    async def run() -> None:
        config = auto_config()
        effects = FakeEffects(config)
        clock = iter(range(100, 200))
        sched, _ = scheduler(config, effects)
        for mid in ("a", "b"):
            await sched.ensure(mid)
            handle = sched.record(mid).handle
            object.__setattr__(handle, "started_at", float(next(clock)))
        await sched.ensure("c")
        assert effects.running == {"b", "c"}
        assert [m for kind, m in effects.log if kind == "stop"] == ["a"]
        assert sched.record("a").reason == "swapped out for c"

    asyncio.run(run())


def test_a_model_that_is_not_placed_by_memory_sees_placed_ones_where_they_run() -> None:
    async def run() -> None:
        config = auto_config()
        pinned = model("pinned", gpus=("1",))
        config = msgspec.structs.replace(config, models={**config.models, "pinned": pinned})
        effects = FakeEffects(config)
        sched, _ = scheduler(config, effects, canonical_gpus={"1": "1"})
        await sched.ensure("a")  # placed on gpu-0
        await sched.ensure("pinned")  # GPU 1: disjoint, so `a` keeps running
        assert effects.running == {"a", "pinned"}

    asyncio.run(run())


class SlowBackend(FakeBackend):
    """The fake GPU backend standing for NVML, whose first reading takes a second (a loaded
    machine's NVML call and /proc walk), or less when the test lets it go (`done`)."""

    def __init__(self, proc: Path, order: list[str]) -> None:
        super().__init__([("Fake 0", fake_uuid(0), 10 * GIB)], proc=proc)
        self.order = order
        self.reading = threading.Event()
        self.done = threading.Event()

    def devices(self) -> list[GpuInfo]:
        if not self.reading.is_set():  # the first reading only
            self.reading.set()
            self.done.wait(1.0)
            self.order.append("reading done")
        return super().devices()


def test_a_slow_gpu_reading_does_not_hold_up_another_models_swap(tmp_path: Path) -> None:
    """While a placement by memory reads the GPUs (NVML and /proc, in a thread, before it
    decides), another model's swap decides, starts it and answers its waiter: nothing waits for
    the reading. (The scheduler once read the GPUs while holding the lock every decision and
    wake-up takes, so the other model was ready only after the reading.)"""

    async def run() -> None:
        proc = tmp_path / "proc"
        proc.mkdir()
        order: list[str] = []
        backend = SlowBackend(proc, order)
        # b runs on no GPU (`gpus: []`): the two share nothing, so neither evicts the other.
        config = Config(
            models={"slow": model("slow", gpus_auto=True, vram=(GIB,)), "b": model("b", gpus=())}
        )
        effects = FakeEffects(config)
        readings = DaemonReadings(
            ProxyRegistry(), BusyChecks(), GpuLedger(backend, Footprints(None))
        )
        policies = functools.partial(choose, by_memory=True)
        sched = Scheduler(config, effects, readings, choose_policy=policies)
        placing = asyncio.create_task(sched.ensure("slow"))
        await asyncio.to_thread(backend.reading.wait, 10)  # the reading is under way
        await sched.ensure("b")
        order.append("b ready")
        backend.done.set()
        await placing
        assert order == ["b ready", "reading done"]
        assert effects.log == [("start", "b"), ("start", "slow")]

    asyncio.run(run())
