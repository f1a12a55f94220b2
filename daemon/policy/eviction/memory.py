"""Placement by measured memory, for the models with `gpus: auto` (docs/gpus.md): the target goes
where its footprint fits (`memory_fit.place`), evicting the fewest idle models, least recently
used first; the other models' targets go to the policy the config chose for them (`rest`), which
sees each placed model where it runs.

What each occupant holds is read before the decision (`Room.gpus`: NVML's process list, and what
was reserved for each placed model's run):

* a model placed by memory holds what was reserved for it, or what it uses when that is more;
* a persistent model (a member of a persistent group) holds what it uses, and is never evicted;
* any other model holds its GPUs whole (no `gpus`: every GPU), swapd's one-at-a-time meaning;
* an asleep model holds what it uses (its residual), whatever it was placed with, and is stopped
  when even that leaves no room. An awake model with a sleep setting that the placement evicts
  is put to sleep instead of stopped; the scheduler then reads the GPUs again and decides once
  more, with it asleep at its residual.

A model that is not ready, that has requests in flight, or whose busyCheck says busy is not
evicted. When only busy models are in the way the swap waits, looking again every RETRY seconds
and at every change, for at most the target's `healthCheckTimeout`; then, or at once when waiting
cannot help, it refuses (503 `no_gpu_room`). A model with a busyCheck that the placement evicts is
read once more first (`preemption.busy_check_wait`).
"""

from __future__ import annotations

from ....ipc.causes import WaitCause
from ....ipc.states import ModelState
from ...config import Config, ModelConfig
from .contract import (
    BY_MEMORY,
    Ask,
    Decision,
    EvictionPolicy,
    GpuRoom,
    MakeRoom,
    Occupant,
    Placement,
    Refuse,
    Room,
    Terms,
    Wait,
)
from .gpu_sets import normalize_gpu
from .groups import memberships
from .memory_fit import Fit, Request, Resident, place
from .preemption import busy_check_wait, split

RETRY = 0.5


class ByMemory:
    def __init__(self, config: Config, rest: EvictionPolicy) -> None:
        self.persistent = frozenset(
            m for m, group in memberships(config).items() if group.config.persistent
        )
        self.rest = rest
        self.margin = config.vram_margin

    def terms(self, target: ModelConfig) -> Terms:
        return BY_MEMORY if target.gpus_auto else self.rest.terms(target)

    def decide(self, ask: Ask, room: Room) -> Decision:
        if not ask.target.gpus_auto:
            return self.rest.decide(ask, room)
        assert room.gpus is not None, "placement by memory decides on a GPU reading"
        gpus = room.gpus
        target = ask.target
        residents = [self._resident(o, gpus) for o in room.occupants.values()]
        request = Request(target.id, gpus.need, may_use=gpus.may_use, prefer=gpus.prefer)
        result = place(request, residents, gpus.gpus, margin=self.margin)
        if isinstance(result, Fit):
            spelled = {g.id: g.uuid or g.id for g in gpus.gpus}
            placement = Placement(
                ids=result.gpus,
                gpus=tuple(spelled[g] for g in result.gpus),
                amounts=result.amounts if gpus.need is not None else (),
                reason=result.reason,
            )
            room_made = busy_check_wait(frozenset(result.evict), ask, room)
            if isinstance(room_made, Wait):
                return room_made
            made = MakeRoom(room_made.stop, placement, overdue=room_made.overdue)
            return split(made, room)
        if not result.wait:
            return Refuse(result.reason)
        waited = target.health_check_timeout
        deadline = (ask.room_since if ask.room_since is not None else ask.now) + waited
        if ask.now >= deadline:
            return Refuse(f"{result.reason} (waited {waited:g}s for the busy models)")
        return Wait(
            result.reason,
            until=min(ask.now + RETRY, deadline),
            for_room=True,
            cause=WaitCause.ROOM,
        )

    def _resident(self, o: Occupant, gpus: GpuRoom) -> Resident:
        model = o.model
        persistent = o.id in self.persistent
        use = gpus.used.get(o.id, {})
        if o.state == ModelState.ASLEEP:
            # What it keeps asleep, as NVML reads it; never busy (a request for it wakes it
            # through a swap of its own).
            return Resident(o.id, dict(use), o.last_use, busy=False, persistent=persistent)
        if model is not None and model.gpus_auto:
            reserved = gpus.reserved.get(o.id, {})
            held = {g: max(reserved.get(g, 0), use.get(g, 0)) for g in {*reserved, *use}}
        elif persistent:
            held = dict(use)
        else:
            # Not placed by memory: it claims its GPUs whole (no `gpus`: every GPU).
            totals = {g.id: g.total for g in gpus.gpus}
            on = model.gpus if model is not None else None
            held = {g: totals.get(g, 0) for g in (_ids(on, gpus) if on is not None else totals)}
        busy = o.state != ModelState.READY or o.in_flight or (o.busy is not None and o.busy.busy)
        return Resident(o.id, held, o.last_use, busy=busy, persistent=persistent)


def _ids(specs: tuple[str, ...], gpus: GpuRoom) -> list[str]:
    """A `gpus` list (indices or UUIDs) as canonical ids, as far as the reading knows them."""
    canonical = {str(g.index): g.id for g in gpus.gpus} | {g.id: g.id for g in gpus.gpus}
    return [canonical.get(normalize_gpu(spec), normalize_gpu(spec)) for spec in specs]
