"""Placement by memory as an eviction policy (daemon/policy/eviction/memory.py): pure, given a GPU
reading written by hand (one 10 GiB GPU; no GPU on this machine). What it stops, where the target
goes, and how long it waits for busy models before it refuses."""

from __future__ import annotations

import pytest

from swapd.daemon.config import Config, ModelConfig, load_config_text
from swapd.daemon.policy.eviction.choose import choose
from swapd.daemon.policy.eviction.contract import (
    Ask,
    Decision,
    GpuRoom,
    MakeRoom,
    Occupant,
    Refuse,
    Room,
    Wait,
)
from swapd.daemon.policy.eviction.memory import RETRY
from swapd.daemon.policy.eviction.memory_fit import GIB, Gpu
from swapd.ipc.states import ModelState

GPU = Gpu(id="gpu-1", index=0, total=10 * GIB, uuid="GPU-1")


def config() -> Config:
    return load_config_text(
        "vramMargin: 0\nmodels:\n"
        "  t:\n    cmd: server --port ${PORT}\n    gpus: auto\n"
        "  a:\n    cmd: server --port ${PORT}\n    gpus: auto\n",
        "c",
    )


def decide(
    need: int, occupants: dict[str, Occupant], now: float, room_since: float | None = None
) -> Decision:
    cfg = config()
    policy = choose(cfg, by_memory=True)
    target: ModelConfig = cfg.models["t"]
    assert policy.terms(target).reads_gpus
    used = {m: {"gpu-1": 6 * GIB} for m in occupants}
    gpus = GpuRoom(gpus=(GPU,), used=used, reserved={}, need=(need,))
    ask = Ask(target, now=now, queued_at=0.0, collate_window=5.0, room_since=room_since)
    return policy.decide(ask, Room(occupants, gpus))


def occupant(model_id: str, *, in_flight: bool) -> Occupant:
    return Occupant(model_id, config().models.get(model_id), ModelState.READY, in_flight=in_flight)


def test_a_busy_model_in_the_way_is_waited_for_then_the_placement_gives_up() -> None:
    busy = {"a": occupant("a", in_flight=True)}
    wait = config().models["t"].health_check_timeout
    first = decide(9 * GIB, busy, now=100.0)
    assert isinstance(first, Wait) and first.for_room and first.until == 100.0 + RETRY
    again = decide(9 * GIB, busy, now=101.0, room_since=100.0)
    assert isinstance(again, Wait) and again.for_room
    # Never past the deadline: the last look is at it.
    late = decide(9 * GIB, busy, now=100.0 + wait - 0.1, room_since=100.0)
    assert isinstance(late, Wait) and late.until == pytest.approx(100.0 + wait)
    over = decide(9 * GIB, busy, now=100.0 + wait, room_since=100.0)
    assert isinstance(over, Refuse) and f"waited {wait:g}s" in over.reason


def test_what_waiting_cannot_cure_is_refused_at_once() -> None:
    refused = decide(90 * GIB, {"a": occupant("a", in_flight=False)}, now=0.0)
    assert isinstance(refused, Refuse) and "needs 90.0 GiB" in refused.reason


def test_an_idle_model_makes_room_and_the_target_goes_where_the_room_is() -> None:
    made = decide(9 * GIB, {"a": occupant("a", in_flight=False)}, now=0.0)
    assert isinstance(made, MakeRoom) and made.stop == {"a"}
    assert made.placement is not None and made.placement.gpus == ("GPU-1",)
    assert made.placement.ids == ("gpu-1",) and made.placement.amounts == (9 * GIB,)
