"""What the scheduler shows its eviction policy: the swap that asks (`Ask`), and the models that
hold their share of the machine (`Occupant`s), each with what the readings say of it."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from ...ipc.states import LOADED_STATES, ModelState
from ..config import Config, ModelConfig
from .eviction.contract import Ask, Occupant
from .records import H, ModelRecord, Readings, RunningModel
from .swap import Swap


def ask(swap: Swap[H], model: ModelConfig, now: float, collate_window: float) -> Ask:
    waits = swap.waits
    return Ask(
        target=model,
        now=now,
        queued_at=swap.turn.queued_at,
        collate_window=collate_window,
        yielded_at=waits.yielded_at if waits is not None else None,
        asked=dict(waits.asked) if waits is not None else {},
        room_since=waits.room_since if waits is not None else None,
    )


def occupants(
    config: Config,
    claims: Iterable[Swap[H]],
    records: Iterable[ModelRecord[H]],
    readings: Readings,
    target: str | None,
) -> dict[str, Occupant]:
    """The targets of claimed swaps (placed, maybe not started yet), then every model with a
    process; never `target`. Each with its definition in `config`, a placed model's `gpus` where
    it runs."""
    result: dict[str, Occupant] = {}
    for swap in claims:
        model = config.models.get(swap.target)
        if swap.target == target or swap.target in result or model is None:
            continue
        gpus = swap.claim.gpus if swap.claim is not None else None
        if gpus is not None:
            model = msgspec.structs.replace(model, gpus=gpus)
        result[swap.target] = occupant(swap.target, model, ModelState.STARTING, None, readings)
    for rec in records:
        if rec.id == target or rec.id in result or rec.state not in LOADED_STATES:
            continue
        model = config.models.get(rec.id)
        placed = rec.model.gpus if rec.model is not None else None
        if model is not None and model.gpus_auto and placed is not None:
            model = msgspec.structs.replace(model, gpus=placed)
        result[rec.id] = occupant(rec.id, model, rec.state, rec.handle, readings)
    return result


def occupant(
    model_id: str,
    model: ModelConfig | None,
    state: ModelState,
    handle: RunningModel | None,
    readings: Readings,
) -> Occupant:
    activity = readings.activity(model_id)
    started = handle.started_at if handle is not None else 0.0
    return Occupant(
        model_id,
        model,
        state,
        pid=handle.pid if handle is not None else None,
        in_flight=activity.in_flight,
        busy=readings.busy(model_id) if state == ModelState.READY else None,
        last_use=max(activity.last, started),
    )
