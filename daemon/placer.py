"""Placement by memory, wired: NVML's view and the learned footprints in, `placement.place` out.

`Placer.plan` is what the scheduler asks before it starts a `gpus: auto` model (see
policy/placing.py); `Placer.sample`, called from the daemon's tick loop, learns each running
model's footprint (machinery/footprints.py) and checks it against what was reserved for it:
use above the reservation is logged and becomes the reservation (and the footprint), so the next
placement counts it. `Placer.gpu_view` is what `swapd status` shows per GPU.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Sequence

import msgspec

from ..ipc.model_status import GpuInfo, ModelStatus
from ..ipc.states import LOADED_STATES
from .config import Config, ModelConfig
from .machinery import gpu, process_tree
from .machinery.footprints import FILE_NAME, Footprints, Usage, attribute, default_state_dir
from .machinery.gpu_backend import GpuBackend, NullBackend
from .machinery.model_process import definition_hash
from .observe import gpu_metrics as figures
from .observe.gpu_metrics import PlacementCounts
from .policy.eviction_groups import memberships
from .policy.placement import Fit, Gpu, NoFit, Request, Resident, gib, place
from .policy.placing import Occupant
from .policy.proxies import ProxyRegistry

log = logging.getLogger("swapd.placement")

SAMPLE_EVERY = 1.0


class Placer:
    def __init__(
        self,
        backend: GpuBackend,
        footprints: Footprints,
        registry: ProxyRegistry,
    ) -> None:
        self.backend = backend
        self.footprints = footprints
        self.registry = registry
        # By model id: GPU UUID (case-folded) -> bytes reserved for its current run.
        self.reserved: dict[str, dict[str, int]] = {}
        # Models placed without a footprint (their GPUs cleared) until their first sample.
        self.cleared: set[str] = set()
        # What a model's busyCheck says (the daemon's busy board): busy models are not evicted.
        self.busy_of: Callable[[str], bool] = lambda _model: False
        # The last reading, for status.
        self.usage = Usage({}, {}, {})
        self.devices: list[GpuInfo] = []
        # For /metrics (observe/gpu_metrics.py).
        self.counts = PlacementCounts()
        # Models whose start waits for busy models to go idle (its first NoFit logged, counted).
        self.waiting: set[str] = set()

    # ------------------------------------------------------------------------------- reading

    async def read(self, occupants: Sequence[Occupant]) -> tuple[list[GpuInfo], Usage]:
        def reading() -> tuple[list[GpuInfo], Usage]:
            devices = self.backend.devices()
            procs = self.backend.processes()
            trees: dict[str, set[int]] = {}
            containers: dict[str, set[str]] = {}
            uuids = gpu.canonical_gpu_ids(devices)
            for o in occupants:
                if o.pid is not None:
                    trees[o.model] = {o.pid, *(p.pid for p in process_tree.process_tree(o.pid))}
                if o.config is not None and o.config.cmd_stop:
                    on = o.config.gpus
                    containers[o.model] = (
                        {uuids.get(_norm(g), _norm(g)) for g in on}
                        if on is not None
                        else {d.uuid.casefold() for d in devices}
                    )
            return devices, attribute(procs, trees, containers)

        devices, usage = await asyncio.to_thread(reading)
        self.devices, self.usage = devices, usage
        self.counts.used = usage.by_model
        return devices, usage

    def need_of(self, model: ModelConfig) -> tuple[tuple[int, ...] | None, str]:
        learned = self.footprints.learned(model.id, definition_hash(model))
        if learned is not None and learned.need():
            return learned.need(), "measured"
        if model.vram:
            return model.vram, "vram hint"
        return None, "unknown"

    # ------------------------------------------------------------------------------- placing

    def _residents(
        self,
        occupants: Sequence[Occupant],
        devices: Sequence[GpuInfo],
        usage: Usage,
        config: Config,
        target: str,
    ) -> list[Resident]:
        groups = memberships(config)
        uuids = gpu.canonical_gpu_ids(devices)
        totals = {d.uuid.casefold(): d.total_bytes for d in devices}
        result = []
        for o in occupants:
            if o.model == target:
                continue
            model = o.config
            member = groups.get(o.model)
            persistent = bool(member and member.config.persistent)
            use = usage.by_model.get(o.model, {})
            if model is not None and model.gpus_auto:
                reserved = self.reserved.get(o.model, {})
                held = {g: max(reserved.get(g, 0), use.get(g, 0)) for g in {*reserved, *use}}
            elif persistent:
                held = dict(use)
            else:
                # Not placed by memory: it claims its GPUs whole (swapd's one-at-a-time meaning).
                on = model.gpus if model is not None else None
                ids = (
                    [uuids.get(_norm(g), _norm(g)) for g in on] if on is not None else list(totals)
                )
                held = {g: totals.get(g, 0) for g in ids}
            busy = (
                o.state != "ready" or self.registry.in_flight(o.model) > 0 or self.busy_of(o.model)
            )
            last = max(self.registry.last_activity.get(o.model, 0.0), o.started_at)
            result.append(Resident(o.model, held, last, busy=busy, persistent=persistent))
        return result

    async def plan(
        self, target: ModelConfig, occupants: Sequence[Occupant], config: Config
    ) -> Fit | NoFit:
        devices, usage = await self.read(occupants)
        residents = self._residents(occupants, devices, usage, config, target.id)
        margin = config.vram_margin
        gpus = [_gpu_of(d, usage, residents, margin) for d in devices]
        need, source = self.need_of(target)
        learned = self.footprints.learned(target.id, definition_hash(target))
        prefer = tuple(learned.peak) if learned is not None else ()
        may_use = allowed_gpus(target, devices)
        request = Request(target.id, need, may_use=may_use, prefer=prefer)
        result = place(request, residents, gpus, margin=margin)
        if isinstance(result, NoFit):
            self._no_fit(target.id, result, source)
            return result
        self.waiting.discard(target.id)
        by_id = {d.uuid.casefold(): d for d in devices}
        chosen = [by_id[g] for g in result.gpus]
        if need is None:
            self.reserved[target.id] = {d.uuid.casefold(): d.total_bytes for d in chosen}
            self.cleared.add(target.id)
            how, why = figures.PLACED_CLEARED, figures.EVICTED_TO_CLEAR
        else:
            self.reserved[target.id] = dict(zip(result.gpus, result.amounts, strict=True))
            self.cleared.discard(target.id)
            how = figures.PLACED_EVICTING if result.evict else figures.PLACED_FITS
            why = figures.EVICTED_FOR_ROOM
        self.counts.placed(target.id, how)
        for evicted in result.evict:
            self.counts.evicted(evicted, why)
        log.info(
            "%s: %s (footprint: %s; GPUs free now: %s)",
            target.id,
            result.reason,
            source,
            _free_text(devices),
        )
        return Fit(gpus=tuple(d.uuid for d in chosen), evict=result.evict, reason=result.reason)

    def _no_fit(self, model: str, result: NoFit, source: str) -> None:
        """A wait is counted once (the scheduler asks again at every change and every 0.5 s, and
        logs the wait's start itself: policy/placing.py)."""
        if not result.wait:
            self.waiting.discard(model)
            self.counts.placed(model, figures.NO_ROOM)
            log.warning("%s: %s (footprint: %s)", model, result.reason, source)
        elif model not in self.waiting:
            self.waiting.add(model)
            self.counts.placed(model, figures.WAITED)
            log.debug("%s: waits for busy models (footprint: %s)", model, source)

    # ------------------------------------------------------------------------------ learning

    async def sample(self, occupants: Sequence[Occupant]) -> list[str]:
        """Learn the footprints of the ready models; correct reservations that were too small.
        Returns the models whose footprint or reservation changed (to publish)."""
        changed: list[str] = []
        try:
            _, usage = await self.read(occupants)
        except Exception as exc:
            log.warning("GPU footprint sample failed: %s", exc)
            return changed
        for o in occupants:
            if o.state != "ready" or o.config is None:
                continue
            use = usage.by_model.get(o.model, {})
            if not use:
                continue
            if self.footprints.observe(o.model, definition_hash(o.config), use):
                changed.append(o.model)
            if not o.config.gpus_auto:
                continue
            if o.model in self.cleared:
                # Placed with no footprint (its GPUs cleared): from now on it holds what it uses.
                self.cleared.discard(o.model)
                self.reserved[o.model] = dict(use)
            reserved = self.reserved.setdefault(o.model, {})
            for g, now in use.items():
                before = reserved.get(g, 0)
                if now > before:
                    if before:
                        self.counts.corrected(o.model)
                        log.warning(
                            "%s uses %s on GPU %s, above the %s reserved for it: footprint "
                            "corrected to %s",
                            o.model,
                            gib(now),
                            g,
                            gib(before),
                            gib(now),
                        )
                    reserved[g] = now
                    changed.append(o.model)
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


def _gpu_of(device: GpuInfo, usage: Usage, residents: Sequence[Resident], margin: int) -> Gpu:
    uuid = device.uuid.casefold()
    owned = sum(use.get(uuid, 0) for use in usage.by_model.values())
    listed = usage.foreign.get(uuid, 0)
    # NVML's used memory beyond what processes are listed with (driver, other containers).
    unlisted = max(device.used_bytes - owned - listed, 0)
    return Gpu(
        id=uuid,
        index=device.index,
        total=device.total_bytes,
        foreign=listed + unlisted,
        foreign_holders=tuple(usage.foreign_holders.get(uuid, ()))
        + ((f"{gib(unlisted)} listed for no process",) if unlisted >= 64 * 1024**2 else ()),
    )


async def gpu_devices(
    backend: GpuBackend, placer: Placer | None, live: Collection[str]
) -> list[GpuInfo]:
    """NVML's devices with what placement reserved on each for the `live` models: what
    `swapd status`, `/running` and `/metrics` show."""
    devices = await gpu.read_devices(backend)
    return devices if placer is None else placer.gpu_view(devices, live)


def make_placer(backend: GpuBackend, registry: ProxyRegistry) -> Placer | None:
    """The placer, with the footprints of the state directory; None without a GPU inventory
    (then `gpus: auto` models get every GPU, as models without `gpus`)."""
    if isinstance(backend, NullBackend):
        return None
    state = default_state_dir()
    log.info("learned GPU footprints live in %s", state / FILE_NAME)
    return Placer(backend, Footprints(state / FILE_NAME), registry)
