"""The GPU/placement families on their own (daemon/observe/gpu_metrics.py): what the collector
makes of a GPU view, model statuses and the GPU ledger's counts, through prometheus-client's
exposition and parser. The stack test (test_placement_metrics.py) has them end to end."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from swapd.daemon.observe.gpu_metrics import GpuCollector, GpuGauges, PlacementCounts
from swapd.ipc.model_status import GpuInfo, ModelStatus

GIB = 1024**3


def samples(gauges: GpuGauges) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(GpuCollector(gauges))
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_families_from_the_gpu_view_statuses_and_counts() -> None:
    gpu = GpuInfo(0, "GPU-AB", "Card", 8 * GIB, 5 * GIB, 3 * GIB, reserved_bytes=4 * GIB)
    a = ModelStatus(
        model="a",
        state="ready",
        footprint={"gpu-ab": 4 * GIB, "gpu-gone": GIB},  # one learned on a GPU taken out since
        reserved={"gpu-ab": 4 * GIB},
        placed_by_memory=True,
    )
    counts = PlacementCounts(used={"a": {"gpu-ab": 3 * GIB}})
    counts.placed("a", "fits")
    counts.placed("a", "fits")
    counts.evicted("b", "room")
    counts.corrected("a")
    m = samples(GpuGauges(gpus=lambda: [gpu], models=lambda: [a], counts=lambda: counts))
    card = (("gpu", "0"), ("name", "Card"), ("uuid", "GPU-AB"))
    assert m[("swapd_gpu_memory_total_bytes", card)] == 8 * GIB
    assert m[("swapd_gpu_memory_used_bytes", card)] == 5 * GIB
    assert m[("swapd_gpu_memory_free_bytes", card)] == 3 * GIB
    assert m[("swapd_gpu_memory_reserved_bytes", card)] == 4 * GIB
    on = (("gpu", "0"), ("model", "a"), ("uuid", "GPU-AB"))
    gone = (("gpu", ""), ("model", "a"), ("uuid", "gpu-gone"))
    assert m[("swapd_model_gpu_footprint_bytes", on)] == 4 * GIB
    assert m[("swapd_model_gpu_footprint_bytes", gone)] == GIB
    assert m[("swapd_model_gpu_reserved_bytes", on)] == 4 * GIB
    assert m[("swapd_model_gpu_memory_used_bytes", on)] == 3 * GIB
    assert m[("swapd_placements_total", (("model", "a"), ("reason", "fits")))] == 2
    assert m[("swapd_placement_evictions_total", (("model", "b"), ("reason", "room")))] == 1
    assert m[("swapd_footprint_corrections_total", (("model", "a"),))] == 1


def test_without_nvml_or_placer_the_families_are_empty() -> None:
    m = samples(GpuGauges())
    assert not [key for key in m if not key[0].endswith("_created")]
