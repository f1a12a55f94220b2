"""The scheduler's side of placement by memory (`gpus: auto`): what it tells the placer, and how
a placer's answer becomes a swap's evictions and GPUs.

The scheduler hands the placer the models that hold (or are about to hold) GPU memory as
`Occupant`s; the placer (daemon/placer.py) adds what only the machinery knows (NVML, learned
footprints, requests in flight) and calls the pure policy (`placement.place`). A `NoFit` that
waiting can cure (busy models in the way) makes the swap wait, re-deciding on every change and at
least every `RETRY` seconds, up to the model's `healthCheckTimeout`; any other `NoFit` answers
503 `no_gpu_room` at once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec

from ...ipc.model_status import ModelState
from ..config import Config, ModelConfig
from ..errors import NoGpuRoom
from .placement import Fit, NoFit
from .records import Swap

log = logging.getLogger("swapd.placement")

RETRY = 0.5


@dataclass(frozen=True)
class Occupant:
    """A model with a process (or a claimed start): the definition it runs with (a placed
    model's `gpus` set to where it runs), its state and pid."""

    model: str
    config: ModelConfig | None
    state: ModelState
    pid: int | None
    started_at: float = 0.0


class Placer(Protocol):
    async def plan(
        self, target: ModelConfig, occupants: Sequence[Occupant], config: Config
    ) -> Fit | NoFit: ...


def placed_view(config: Config, occupants: Sequence[Occupant]) -> Config:
    """`config` with each running `gpus: auto` model's `gpus` set to where it runs, so that the
    group/GPU eviction policy of a model that is not placed by memory sees them there."""
    placed = {
        o.model: o.config
        for o in occupants
        if o.config is not None and o.config.gpus_auto and o.config.gpus is not None
    }
    placed = {m: c for m, c in placed.items() if m in config.models}
    if not placed:
        return config
    return msgspec.structs.replace(config, models={**config.models, **placed})


def with_gpus(model: ModelConfig, gpus: tuple[str, ...] | None) -> ModelConfig:
    return model if gpus is None else msgspec.structs.replace(model, gpus=gpus)


async def decide(
    placer: Placer,
    swap: Swap[object],
    model: ModelConfig,
    occupants: Sequence[Occupant],
    config: Config,
    now: float,
) -> frozenset[str] | None:
    """The models to evict for `model` (and `swap.gpus` set), or None to wait and decide again.
    Raises NoGpuRoom when nothing can make room."""
    plan = await placer.plan(model, occupants, config)
    if isinstance(plan, Fit):
        swap.gpus = plan.gpus
        swap.place_deadline = None
        return frozenset(plan.evict)
    if not plan.wait:
        raise NoGpuRoom(plan.reason)
    if swap.place_deadline is None:
        swap.place_deadline = now + model.health_check_timeout
        log.info("%s: waiting for GPU room: %s", model.id, plan.reason)
    if now >= swap.place_deadline:
        raise NoGpuRoom(
            f"{plan.reason} (waited {model.health_check_timeout:g}s for the busy models)"
        )
    return None
