"""The GPU memory ledger, for placement by memory (`gpus: auto`): what NVML and /proc say each
model uses, what was reserved for each placed model's run, and the footprints learned.

`GpuLedger.read` is the reading a placement decision needs (`policy/eviction/memory.py` decides,
purely, from it); the scheduler takes it before it decides, never while. `book` keeps what the
policy decided (told through the daemon's effects): a placement's reservation, and the counts
for /metrics and the log of placements, waits and refusals. `sample`, called from the daemon's
tick loop, learns each running model's footprint (machinery/footprints.py) and checks it against
what was reserved for it: use above the reservation is logged and becomes the reservation (and
the footprint), so the next placement counts it. `gpu_view` is what `swapd status` shows per GPU.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence

import msgspec

from ..ipc.model_status import GpuInfo, ModelStatus
from ..ipc.states import LOADED_STATES, ModelState
from .config import ModelConfig
from .machinery import gpu, process_tree
from .machinery.footprints import FILE_NAME, Footprints, Usage, attribute, default_state_dir
from .machinery.gpu_backend import GpuBackend, NullBackend
from .machinery.model_process import definition_hash
from .observe import gpu_metrics as figures
from .observe.gpu_metrics import PlacementCounts
from .policy.eviction.contract import (
    Decision,
    GpuRoom,
    MakeRoom,
    Occupant,
    Placement,
    Refuse,
    Wait,
)
from .policy.eviction.memory_fit import Gpu, gib

log = logging.getLogger("swapd.placement")

SAMPLE_EVERY = 1.0


class GpuLedger:
    def __init__(self, backend: GpuBackend, footprints: Footprints) -> None:
        self.backend = backend
        self.footprints = footprints
        # By model id: GPU UUID (case-folded) -> bytes reserved for its current run.
        self.reserved: dict[str, dict[str, int]] = {}
        # Models placed without a footprint (their GPUs cleared) until their first sample.
        self.cleared: set[str] = set()
        # The last reading, for status and the placement's log line.
        self.usage = Usage({}, {}, {})
        self.devices: list[GpuInfo] = []
        # For /metrics (observe/gpu_metrics.py).
        self.counts = PlacementCounts()
        # Models whose start waits for busy models to go idle (the wait logged and counted once).
        self.waiting: set[str] = set()

    # ------------------------------------------------------------------------------- reading

    async def _read(self, occupants: Sequence[Occupant]) -> tuple[list[GpuInfo], Usage]:
        def reading() -> tuple[list[GpuInfo], Usage]:
            devices = self.backend.devices()
            procs = self.backend.processes()
            trees: dict[str, set[int]] = {}
            containers: dict[str, set[str]] = {}
            uuids = gpu.canonical_gpu_ids(devices)
            for o in occupants:
                if o.pid is not None:
                    trees[o.id] = {o.pid, *(p.pid for p in process_tree.process_tree(o.pid))}
                if o.model is not None and o.model.cmd_stop:
                    on = o.model.gpus
                    containers[o.id] = (
                        {uuids.get(_norm(g), _norm(g)) for g in on}
                        if on is not None
                        else {d.uuid.casefold() for d in devices}
                    )
            return devices, attribute(procs, trees, containers)

        devices, usage = await asyncio.to_thread(reading)
        self.devices, self.usage = devices, usage
        self.counts.used = usage.by_model
        return devices, usage

    async def read(self, target: ModelConfig, occupants: Sequence[Occupant]) -> GpuRoom:
        """What a placement of `target` decides on (reads NVML and /proc, in a thread)."""
        devices, usage = await self._read(occupants)
        learned = self.footprints.learned(target.id, definition_hash(target))
        return GpuRoom(
            gpus=tuple(_gpu_of(d, usage) for d in devices),
            used=usage.by_model,
            reserved={m: dict(held) for m, held in self.reserved.items()},
            need=self.need_of(target)[0],
            prefer=tuple(learned.peak) if learned is not None else (),
            may_use=allowed_gpus(target, devices),
        )

    def need_of(self, model: ModelConfig) -> tuple[tuple[int, ...] | None, str]:
        learned = self.footprints.learned(model.id, definition_hash(model))
        if learned is not None and learned.need():
            return learned.need(), "measured"
        if model.vram:
            return model.vram, "vram hint"
        return None, "unknown"

    # ------------------------------------------------------------------------------- booking

    def book(self, target: ModelConfig, decision: Decision) -> None:
        """What the eviction policy decided for a `gpus: auto` target: a placement's
        reservation, and for /metrics and the log a placement, a wait or a refusal."""
        if not target.gpus_auto:
            return
        if isinstance(decision, MakeRoom) and decision.placement is not None:
            self.placed(target, decision.placement, decision.stop)
        elif isinstance(decision, Wait) and decision.for_room:
            self.waits(target, decision.reason)
        elif isinstance(decision, Refuse):
            self.refused(target, decision.reason)

    def placed(self, target: ModelConfig, placement: Placement, evict: Collection[str]) -> None:
        """A placement decided: its reservation, counts and log line."""
        self.waiting.discard(target.id)
        totals = {d.uuid.casefold(): d.total_bytes for d in self.devices}
        if not placement.amounts:
            self.reserved[target.id] = {g: totals.get(g, 0) for g in placement.ids}
            self.cleared.add(target.id)
            how, why = figures.PLACED_CLEARED, figures.EVICTED_TO_CLEAR
        else:
            self.reserved[target.id] = dict(zip(placement.ids, placement.amounts, strict=True))
            self.cleared.discard(target.id)
            how = figures.PLACED_EVICTING if evict else figures.PLACED_FITS
            why = figures.EVICTED_FOR_ROOM
        self.counts.placed(target.id, how)
        for evicted in sorted(evict):
            self.counts.evicted(evicted, why)
        log.info(
            "%s: %s (footprint: %s; GPUs free now: %s)",
            target.id,
            placement.reason,
            self.need_of(target)[1],
            _free_text(self.devices),
        )

    def waits(self, target: ModelConfig, reason: str) -> None:
        """A placement waits for busy models: counted and logged once per wait."""
        if target.id not in self.waiting:
            self.waiting.add(target.id)
            self.counts.placed(target.id, figures.WAITED)
            log.info(
                "%s: waiting for GPU room: %s (footprint: %s)",
                target.id,
                reason,
                self.need_of(target)[1],
            )

    def refused(self, target: ModelConfig, reason: str) -> None:
        self.waiting.discard(target.id)
        self.counts.placed(target.id, figures.NO_ROOM)
        log.warning("%s: %s (footprint: %s)", target.id, reason, self.need_of(target)[1])

    # ------------------------------------------------------------------------------ learning

    async def sample(self, occupants: Sequence[Occupant]) -> list[str]:
        """Learn the footprints of the ready models; correct reservations that were too small.
        Returns the models whose footprint or reservation changed (to publish)."""
        changed: list[str] = []
        try:
            _, usage = await self._read(occupants)
        except Exception as exc:
            log.warning("GPU footprint sample failed: %s", exc)
            return changed
        for o in occupants:
            if o.state != ModelState.READY or o.model is None:
                continue
            use = usage.by_model.get(o.id, {})
            if not use:
                continue
            if self.footprints.observe(o.id, definition_hash(o.model), use):
                changed.append(o.id)
            if not o.model.gpus_auto:
                continue
            if o.id in self.cleared:
                # Placed with no footprint (its GPUs cleared): from now on it holds what it uses.
                self.cleared.discard(o.id)
                self.reserved[o.id] = dict(use)
            reserved = self.reserved.setdefault(o.id, {})
            for g, now in use.items():
                before = reserved.get(g, 0)
                if now > before:
                    if before:
                        self.counts.corrected(o.id)
                        log.warning(
                            "%s uses %s on GPU %s, above the %s reserved for it: footprint "
                            "corrected to %s",
                            o.id,
                            gib(now),
                            g,
                            gib(before),
                            gib(now),
                        )
                    reserved[g] = now
                    changed.append(o.id)
        self.footprints.save()
        return sorted(set(changed))

    def forget(self, model: str) -> None:
        self.reserved.pop(model, None)
        self.cleared.discard(model)

    def gpu_view(self, devices: Sequence[GpuInfo], live: Collection[str]) -> list[GpuInfo]:
        """`devices` with the bytes reserved on each by the `live` models placed by memory."""
        view: dict[str, int] = {}
        for model, held in self.reserved.items():
            if model in live:
                for g, n in held.items():
                    view[g] = view.get(g, 0) + n
        return [
            msgspec.structs.replace(d, reserved_bytes=view.get(d.uuid.casefold(), 0))
            for d in devices
        ]

    def annotate(self, status: ModelStatus, model: ModelConfig | None) -> ModelStatus:
        """`status` with the model's learned footprint and its reservation."""
        if model is None:
            return status
        learned = self.footprints.learned(model.id, definition_hash(model))
        live = status.state in LOADED_STATES
        return msgspec.structs.replace(
            status,
            footprint=dict(learned.peak) if learned is not None else {},
            footprint_source=self.need_of(model)[1] if model.gpus_auto else "",
            reserved=dict(self.reserved.get(model.id, {})) if live and model.gpus_auto else {},
            placed_by_memory=model.gpus_auto,
        )


def allowed_gpus(model: ModelConfig, devices: Sequence[GpuInfo]) -> tuple[str, ...] | None:
    """The canonical ids of the GPUs a `gpus: {auto: [...]}` model may be placed on; None: any."""
    if model.gpus_allowed is None:
        return None
    return tuple(d.uuid.casefold() for d in gpu.resolve_gpus(model.gpus_allowed, devices))


def _free_text(devices: Sequence[GpuInfo]) -> str:
    return ", ".join(f"GPU {d.index} {gib(d.free_bytes)}" for d in devices) or "no GPU"


def _norm(spec: str) -> str:
    text = spec.strip()
    return str(int(text)) if text.isdecimal() else text.casefold()


def _gpu_of(device: GpuInfo, usage: Usage) -> Gpu:
    uuid = device.uuid.casefold()
    owned = sum(use.get(uuid, 0) for use in usage.by_model.values())
    listed = usage.foreign.get(uuid, 0)
    # NVML's used memory beyond what processes are listed with (driver, other containers).
    unlisted = max(device.used_bytes - owned - listed, 0)
    return Gpu(
        id=uuid,
        index=device.index,
        total=device.total_bytes,
        uuid=device.uuid,
        foreign=listed + unlisted,
        foreign_holders=tuple(usage.foreign_holders.get(uuid, ()))
        + ((f"{gib(unlisted)} listed for no process",) if unlisted >= 64 * 1024**2 else ()),
    )


async def gpu_devices(
    backend: GpuBackend, ledger: GpuLedger | None, live: Collection[str]
) -> list[GpuInfo]:
    """NVML's devices with what placement reserved on each for the `live` models: what
    `swapd status`, `/running` and `/metrics` show."""
    devices = await gpu.read_devices(backend)
    return devices if ledger is None else ledger.gpu_view(devices, live)


def make_ledger(backend: GpuBackend) -> GpuLedger | None:
    """The ledger, with the footprints of the state directory; None without a GPU inventory
    (then `gpus: auto` models get every GPU, as models without `gpus`)."""
    if isinstance(backend, NullBackend):
        return None
    state = default_state_dir()
    log.info("learned GPU footprints live in %s", state / FILE_NAME)
    return GpuLedger(backend, Footprints(state / FILE_NAME))
