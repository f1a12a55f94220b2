"""The GPU and placement families of `/metrics` (docs/gpus.md, "Metrics"): per GPU its memory as
NVML reports it and what placement by memory reserved on it; per model the footprint swapd learned,
what it uses now and what is reserved for it; and how often placement placed, waited, refused,
evicted and corrected a footprint.

Read at scrape time from the daemon's GPU view (NVML's devices with the reservations added, see
`daemon/gpu_ledger.py`) and from the ledger's counts (`PlacementCounts`). Label `gpu` is the GPU's
index, `uuid` its UUID as NVML spells it; a footprint learned on a GPU that is not in the inventory
now (a card taken out) keeps its UUID and an empty `gpu`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ...ipc.model_status import GpuInfo, ModelStatus

# `swapd_placements_total{reason}`: how a `gpus: auto` start was decided.
PLACED_FITS = "fits"  # it fitted beside what runs, nothing evicted
PLACED_EVICTING = "evicting"  # it fitted once idle models were evicted (least recently used)
PLACED_CLEARED = "cleared"  # no footprint and no vram hint: every GPU it may use, cleared
WAITED = "waiting"  # no room until busy models are idle: the start waits (once per wait)
NO_ROOM = "no_room"  # nothing can make room: the request failed (503 no_gpu_room)
# `swapd_placement_evictions_total{reason}`: why a model was stopped by a placement.
EVICTED_FOR_ROOM = "room"
EVICTED_TO_CLEAR = "cleared"


@dataclass
class PlacementCounts:
    """What the GPU ledger counts (daemon/gpu_ledger.py), and its last NVML sample's reading."""

    placements: dict[tuple[str, str], int] = field(default_factory=dict)  # (model, reason)
    evictions: dict[tuple[str, str], int] = field(default_factory=dict)  # (evicted, reason)
    corrections: dict[str, int] = field(default_factory=dict)  # model -> use above reserved
    used: dict[str, dict[str, int]] = field(default_factory=dict)  # model -> GPU -> bytes now

    def placed(self, model: str, reason: str) -> None:
        self.placements[(model, reason)] = self.placements.get((model, reason), 0) + 1

    def evicted(self, model: str, reason: str) -> None:
        self.evictions[(model, reason)] = self.evictions.get((model, reason), 0) + 1

    def corrected(self, model: str) -> None:
        self.corrections[model] = self.corrections.get(model, 0) + 1


@dataclass
class GpuGauges:
    """The callables the collector reads; the daemon fills them."""

    gpus: Callable[[], Iterable[GpuInfo]] = lambda: ()
    models: Callable[[], Iterable[ModelStatus]] = lambda: ()
    counts: Callable[[], PlacementCounts | None] = lambda: None


def gpu_families(
    gpus: Iterable[GpuInfo], models: Iterable[ModelStatus], counts: PlacementCounts | None
) -> Iterator[Metric]:
    devices = list(gpus)
    labels = ["gpu", "name", "uuid"]
    total = GaugeMetricFamily("swapd_gpu_memory_total_bytes", "GPU memory (NVML)", labels=labels)
    used = GaugeMetricFamily(
        "swapd_gpu_memory_used_bytes", "GPU memory in use, by any process (NVML)", labels=labels
    )
    free = GaugeMetricFamily("swapd_gpu_memory_free_bytes", "GPU memory free (NVML)", labels=labels)
    reserved = GaugeMetricFamily(
        "swapd_gpu_memory_reserved_bytes",
        "GPU memory reserved for the running models placed by memory (gpus: auto)",
        labels=labels,
    )
    for gpu in devices:
        values = [str(gpu.index), gpu.name, gpu.uuid]
        total.add_metric(values, float(gpu.total_bytes))
        used.add_metric(values, float(gpu.used_bytes))
        free.add_metric(values, float(gpu.free_bytes))
        reserved.add_metric(values, float(gpu.reserved_bytes))
    yield from (total, used, free, reserved)

    index = {d.uuid.casefold(): (str(d.index), d.uuid) for d in devices}

    def where(key: str) -> list[str]:
        gpu, uuid = index.get(key.casefold(), ("", key))
        return [gpu, uuid]

    per_model = ["model", "gpu", "uuid"]
    footprint = GaugeMetricFamily(
        "swapd_model_gpu_footprint_bytes",
        "the model's learned GPU footprint: the peak its processes held while ready (NVML)",
        labels=per_model,
    )
    held = GaugeMetricFamily(
        "swapd_model_gpu_reserved_bytes",
        "GPU memory reserved for the model's current run (placed by memory)",
        labels=per_model,
    )
    now = GaugeMetricFamily(
        "swapd_model_gpu_memory_used_bytes",
        "GPU memory the model's processes hold, at the last sample (NVML)",
        labels=per_model,
    )
    for st in models:
        for gpu_id, n in sorted(st.footprint.items()):
            footprint.add_metric([st.model, *where(gpu_id)], float(n))
        for gpu_id, n in sorted(st.reserved.items()):
            held.add_metric([st.model, *where(gpu_id)], float(n))
    if counts is not None:
        for model, use in sorted(counts.used.items()):
            for gpu_id, n in sorted(use.items()):
                now.add_metric([model, *where(gpu_id)], float(n))
    yield from (footprint, held, now)
    yield from _counters(counts or PlacementCounts())


def _counters(counts: PlacementCounts) -> Iterator[Metric]:
    labelled: tuple[tuple[str, str, list[str], Mapping[Any, int]], ...] = (
        (
            "swapd_placements",
            "placement decisions for gpus: auto starts, by reason: fits, evicting, cleared, "
            "waiting (busy models in the way; once per wait), no_room (refused)",
            ["model", "reason"],
            counts.placements,
        ),
        (
            "swapd_placement_evictions",
            "models a placement chose to stop, by reason: room (least recently used, to make "
            "room), cleared (the GPUs of a model without a footprint)",
            ["model", "reason"],
            counts.evictions,
        ),
        (
            "swapd_footprint_corrections",
            "times a model placed by memory used more than was reserved for it (the reservation "
            "grew)",
            ["model"],
            counts.corrections,
        ),
    )
    for name, documentation, labels, values in labelled:
        family = CounterMetricFamily(name, documentation, labels=labels)
        for key, n in sorted(values.items()):
            family.add_metric(list(key) if isinstance(key, tuple) else [key], float(n))
        yield family


class GpuCollector(Collector):
    def __init__(self, gauges: GpuGauges) -> None:
        self.gauges = gauges

    def collect(self) -> Iterable[Metric]:
        g = self.gauges
        return list(gpu_families(g.gpus(), g.models(), g.counts()))
