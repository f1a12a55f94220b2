"""The GPU ledger's counts for /metrics and its log lines (daemon/gpu_ledger.py), booking what the
real eviction policy decides on the ledger's own reading, with the fake GPU backend standing for
NVML over an empty process table (one 10 GiB GPU, nothing on it but what the ledger reserved): a
wait counted once however often the scheduler asks again, then a placement that evicts, then a
refusal."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from swapd.daemon.config import Config, ModelConfig
from swapd.daemon.gpu_ledger import GpuLedger
from swapd.daemon.machinery.footprints import Footprints
from swapd.daemon.machinery.gpu_fake import FakeBackend, fake_uuid
from swapd.daemon.policy.eviction.choose import choose
from swapd.daemon.policy.eviction.contract import (
    Ask,
    Decision,
    MakeRoom,
    Occupant,
    Refuse,
    Room,
    Wait,
)
from swapd.daemon.policy.eviction.memory_fit import GIB
from swapd.ipc.states import ModelState
from tests.support.models import model

UUID = fake_uuid(0).casefold()


def test_placements_evictions_and_waits_are_counted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()  # no process holds GPU memory
    backend = FakeBackend([("Fake 0", fake_uuid(0), 10 * GIB)], proc=proc)
    ledger = GpuLedger(backend, Footprints(None))
    a = model("a", gpus_auto=True, vram=(6 * GIB,))
    t = model("t", gpus_auto=True, vram=(6 * GIB,))
    huge = model("huge", gpus_auto=True, vram=(20 * GIB,))
    config = Config(models={"a": a, "t": t, "huge": huge})
    policy = choose(config, by_memory=True)
    ledger.reserved["a"] = {UUID: 6 * GIB}

    async def decide(target: ModelConfig, occupants: list[Occupant]) -> Decision:
        room = await ledger.read(target, occupants)
        ask = Ask(target, now=0.0, queued_at=0.0, collate_window=0.0)
        decision = policy.decide(ask, Room({o.id: o for o in occupants}, room))
        ledger.book(target, decision)  # as the daemon's effects do
        return decision

    async def run() -> None:
        starting = [Occupant("a", a, ModelState.STARTING)]  # busy: not evictable yet
        for _ in range(3):  # the scheduler asks again at every change
            assert isinstance(await decide(t, starting), Wait)
        ready = [Occupant("a", a, ModelState.READY)]
        placed = await decide(t, ready)
        assert isinstance(placed, MakeRoom) and placed.stop == {"a"}
        assert isinstance(await decide(huge, []), Refuse)

    with caplog.at_level(logging.INFO, logger="swapd.placement"):
        asyncio.run(run())
    counts = ledger.counts
    assert counts.placements == {("t", "waiting"): 1, ("t", "evicting"): 1, ("huge", "no_room"): 1}
    assert counts.evictions == {("a", "room"): 1}
    placed = [r.getMessage() for r in caplog.records if "t placed" in r.getMessage()]
    assert len(placed) == 1
    # What was needed, the room, what was evicted, and what NVML had free.
    assert "GPU 0: needs 6.0 GiB, room 3.5 GiB (9.5 GiB after evictions)" in placed[0]
    assert "evicting a (least recently used)" in placed[0]
    assert "GPUs free now: GPU 0 10.0 GiB" in placed[0]
    refused = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(refused) == 1 and "huge needs 20.0 GiB" in refused[0].getMessage()
