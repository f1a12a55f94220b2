"""The performance sampler (daemon/observe/performance.py), the GPU backends' figures for it and
the hardware snapshot, without a stack: sampling starts when a reader comes and stops when none
has come for a while, the ring and the `after` filter, llama-swap's `SysStat`/`GpuStat` shapes
and `llamaswap_*` series, NVML's figures (a stub `pynvml`: this machine has no GPU), and
`/api/hardware`'s shape as llama-swap's UI reads it."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from swapd.daemon.machinery.gpu_backend import GpuTelemetry, NullBackend
from swapd.daemon.machinery.gpu_fake import FakeBackend, fake_uuid
from swapd.daemon.machinery.gpu_nvml import NvmlBackend
from swapd.daemon.observe import hardware, performance
from swapd.daemon.observe.performance import PerformanceFigures, Sampler, parse_after
from tests.support import llama_ui
from tests.support.nvml import StubNvml

GPU = GpuTelemetry(
    index=0,
    uuid="GPU-x",
    name='Card "X"',
    temp_c=50,
    gpu_util_pct=90.0,
    mem_used_bytes=40 * 2**30,
    mem_total_bytes=80 * 2**30,
    power_draw_w=350.5,
)


class _Reads:
    """Counts the host and GPU reads a sampler makes (they stand for psutil and NVML)."""

    def __init__(self) -> None:
        self.host = 0
        self.gpus = 0

    def read_host(self, first: bool) -> dict[str, Any]:
        self.host += 1
        return {
            "cpu_util_per_core": [10.0, 20.0],
            "mem_total_mb": 1024,
            "mem_used_mb": 512,
            "mem_free_mb": 256,
            "swap_total_mb": 0,
            "swap_used_mb": 0,
            "load_avg_1": 0.5,
            "load_avg_5": 0.25,
            "load_avg_15": 0.125,
            "net_io": [{"name": "eth0", "bytes_recv": 1000, "bytes_sent": 2000}],
        }

    def read_gpus(self) -> list[GpuTelemetry]:
        self.gpus += 1
        return [GPU]


async def _until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        for _ in iter(int, 1):
            if predicate():
                return
            await asyncio.sleep(0.01)


async def test_sampling_starts_with_a_reader_and_stops_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(performance, "IDLE_S", 0.3)
    reads = _Reads()
    sampler = Sampler(reads.read_gpus, every=0.05, read_host=reads.read_host)
    await asyncio.sleep(0.1)
    assert (reads.host, reads.gpus, sampler.running) == (0, 0, False)  # nobody asked
    await sampler.wanted()
    assert sampler.running and reads.host >= 1 and reads.gpus >= 1  # the first sample is there
    assert sampler._task is not None
    await asyncio.wait_for(sampler._task, 5)  # it ends by itself once IDLE_S passed unread
    stopped_at = reads.host
    await asyncio.sleep(0.2)
    assert reads.host == stopped_at  # nobody asked for IDLE_S: no more reads
    assert len(sampler.samples) == stopped_at  # what it sampled stays
    await sampler.wanted()  # a reader again: sampling again
    assert sampler.running and reads.host > stopped_at
    await sampler.close()


async def test_disabled_samples_nothing() -> None:
    reads = _Reads()
    sampler = Sampler(reads.read_gpus, disabled=True, read_host=reads.read_host)
    await sampler.wanted()
    assert (reads.host, sampler.running, sampler.latest()) == (0, False, None)
    registry = CollectorRegistry()
    registry.register(PerformanceFigures(sampler))
    assert b"llamaswap" not in generate_latest(registry)


async def test_document_is_llama_swaps_shape_and_after_filters() -> None:
    reads = _Reads()
    sampler = Sampler(reads.read_gpus, every=0.01, read_host=reads.read_host)
    await sampler.wanted()
    await _until(lambda: len(sampler.samples) >= 3)
    sampler.stop()
    doc = json.loads(sampler.document())
    llama_ui.check(doc, llama_ui.PERFORMANCE, "/api/performance")
    assert len(doc["sys_stats"]) == len(doc["gpu_stats"]) >= 3
    gpu = doc["gpu_stats"][0]
    assert (gpu["mem_used_mb"], gpu["mem_total_mb"], gpu["mem_util_pct"]) == (40960, 81920, 50.0)
    # The Performance page asks for what came after the last sample it has.
    after = parse_after(doc["sys_stats"][1]["timestamp"])
    newer = json.loads(sampler.document(after))
    assert [s["timestamp"] for s in newer["sys_stats"]] == [
        s["timestamp"] for s in doc["sys_stats"][2:]
    ]
    assert parse_after("2026-08-22T09:29:57.123456789-07:00") is not None  # Go's nanoseconds
    assert parse_after("yesterday") is None and parse_after("2026-08-22T09:29:57") is None


def test_the_ring_holds_an_hour() -> None:
    assert Sampler(list, every=5.0).samples.maxlen == 720
    sampler = Sampler(list, every=5.0)
    sampler.reconfigure(False, 60.0)
    assert sampler.samples.maxlen == 60


async def test_llamaswap_series_from_the_latest_sample() -> None:
    reads = _Reads()
    sampler = Sampler(reads.read_gpus, read_host=reads.read_host)
    await sampler.wanted()
    sampler.stop()
    registry = CollectorRegistry()
    registry.register(PerformanceFigures(sampler))
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    cpu = families["llamaswap_cpu_util_percent"].samples
    assert [(s.labels, s.value) for s in cpu] == [({"core": "0"}, 10.0), ({"core": "1"}, 20.0)]
    assert families["llamaswap_memory_used_bytes"].samples[0].value == 512 * 2**20
    load = {s.labels["interval"]: s.value for s in families["llamaswap_load_average"].samples}
    assert load == {"1m": 0.5, "5m": 0.25, "15m": 0.125}
    net = families["llamaswap_network_bytes"]
    assert net.type == "counter"
    assert {(s.name, s.labels["direction"], s.value) for s in net.samples} == {
        ("llamaswap_network_bytes_total", "recv", 1000.0),
        ("llamaswap_network_bytes_total", "sent", 2000.0),
    }
    power = families["llamaswap_gpu_power_draw_watts"].samples[0]
    assert power.labels == {"id": "0", "name": 'Card "X"', "uuid": "GPU-x"}
    assert power.value == 350.5
    assert families["llamaswap_gpu_memory_total_bytes"].samples[0].value == 80 * 2**30


def test_nvml_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    stub = StubNvml(old_driver=False)
    monkeypatch.setitem(sys.modules, "pynvml", stub)
    first, second = NvmlBackend().telemetry()
    assert (first.name, first.temp_c, first.vram_temp_c, first.gpu_util_pct) == (
        "NVIDIA H100",
        41,
        52,
        87.0,
    )
    # No fan on a passive card, no memory temperature on the other: 0, as llama-swap reports.
    assert (first.fan_speed_pct, second.fan_speed_pct, second.vram_temp_c) == (0.0, 33.0, 0)
    assert (first.power_draw_w, first.power_limit_w) == (412.5, 700.0)
    assert (first.architecture, second.architecture) == ("Hopper", "Ada")
    assert first.driver_version == "560.35.03" and first.vendor == "NVIDIA"
    assert (first.mem_used_bytes, first.mem_total_bytes) == (2**30, 80 * 2**30)


def test_fake_and_null_backends_report_figures() -> None:
    fake = FakeBackend([("Fake GPU 0", fake_uuid(0), 80 * 2**30)], scope="nobody-uses-this")
    [idle] = fake.telemetry()
    assert (idle.uuid, idle.gpu_util_pct, idle.mem_used_bytes) == (fake_uuid(0), 0.0, 0)
    assert NullBackend("none").telemetry() == []


def test_hardware_snapshot_as_the_ui_reads_it() -> None:
    h200 = GpuTelemetry(
        index=0,
        uuid="u",
        name="NVIDIA H200",
        vendor="NVIDIA",
        architecture="Hopper",
        driver_version="560",
        mem_total_bytes=141 * 2**30,
        power_limit_w=700.0,
    )
    snap = hardware.snapshot([h200])
    llama_ui.check(snap, llama_ui.HARDWARE, "/api/hardware")
    [gpu] = snap["accelerators"]
    assert gpu["memory"] == {"kind": "dedicated", "capacity_bytes": 141 * 2**30}
    assert gpu["driver"] == {"name": "NVIDIA", "version": "560"}
    assert snap["memory"]["capacity_bytes"] > 0 and snap["operating_system"]["family"] == "linux"
    assert hardware.snapshot([])["accelerators"] == []
