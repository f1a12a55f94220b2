"""The performance sampler: the host's and the GPUs' figures every `performance.every`, kept for an
hour, as llama-swap's `internal/perf` keeps them, for `GET /api/performance` (its `SysStat` and
`GpuStat` lists) and for its `llamaswap_*` series on `/metrics` (`PerformanceFigures`), which its
example Grafana dashboard reads.

The host's figures come from psutil (per-core CPU use since the last sample, memory, swap, load,
the network counters but loopback's); the GPUs' from the daemon's GPU backend (NVML; the fake
backend in tests), read in a worker thread as every backend call is.

Sampling costs nothing while nobody asks for it: it starts when a reader comes (`/api/performance`,
a `/metrics` scrape), takes its first sample then, and stops once no reader has come for
`IDLE_S`; what it sampled stays for the next reader. `performance.disabled` turns it off
(`/api/performance` answers 503 `{"enabled": false}`, as llama-swap's, and `/metrics` has no
`llamaswap_*` series).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..machinery.gpu_backend import GpuTelemetry

log = logging.getLogger("swapd.performance")

RING_SECONDS = 3600.0  # llama-swap keeps an hour of samples
IDLE_S = float(os.environ.get("SWAPD_PERFORMANCE_IDLE_S", "") or 900)
# The first sample's CPU figures: use over this long (psutil has no earlier reading to compare).
FIRST_CPU_S = 0.2
MB = 1024 * 1024
_FRACTION = re.compile(r"(\.\d{6})\d+")

_encode = msgspec.json.Encoder().encode


def _stamp(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def read_host(first: bool = False) -> dict[str, Any]:
    """llama-swap's `SysStat` now, as psutil reads it (`first`: CPU use over a short wait)."""
    cores = psutil.cpu_percent(interval=FIRST_CPU_S if first else None, percpu=True)
    memory = psutil.virtual_memory()
    try:
        swap = psutil.swap_memory()
        swap_total, swap_used = swap.total // MB, swap.used // MB
    except (OSError, RuntimeError):
        swap_total = swap_used = 0
    try:
        load1, load5, load15 = os.getloadavg()
    except OSError:
        load1 = load5 = load15 = 0.0
    try:
        counters = psutil.net_io_counters(pernic=True)
    except (OSError, RuntimeError):
        counters = {}
    return {
        "cpu_util_per_core": [float(c) for c in cores],
        "mem_total_mb": memory.total // MB,
        "mem_used_mb": memory.used // MB,
        "mem_free_mb": memory.free // MB,
        "swap_total_mb": swap_total,
        "swap_used_mb": swap_used,
        "load_avg_1": load1,
        "load_avg_5": load5,
        "load_avg_15": load15,
        "net_io": [
            {"name": name, "bytes_recv": c.bytes_recv, "bytes_sent": c.bytes_sent}
            for name, c in sorted(counters.items())
            if name != "lo"
        ],
    }


def gpu_stat(gpu: GpuTelemetry) -> dict[str, Any]:
    """llama-swap's `GpuStat` of one GPU (its memory use percent is used over total, as its
    nvidia-smi reader computes it)."""
    total = gpu.mem_total_bytes
    return {
        "id": gpu.index,
        "name": gpu.name,
        "uuid": gpu.uuid,
        "temp_c": gpu.temp_c,
        "vram_temp_c": gpu.vram_temp_c,
        "gpu_util_pct": gpu.gpu_util_pct,
        "mem_util_pct": gpu.mem_used_bytes / total * 100 if total else 0.0,
        "mem_used_mb": gpu.mem_used_bytes // MB,
        "mem_total_mb": total // MB,
        "fan_speed_pct": gpu.fan_speed_pct,
        "power_draw_w": gpu.power_draw_w,
    }


def parse_after(text: str) -> datetime | None:
    """An RFC 3339 time (`?after=`), None when it is not one."""
    try:
        at = datetime.fromisoformat(_FRACTION.sub(r"\1", text.strip()).replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


class Sample(msgspec.Struct, frozen=True):
    at: datetime
    host: dict[str, Any] | None  # None: the host could not be read this time
    gpus: tuple[dict[str, Any], ...]


class Sampler:
    """Samples while someone reads; `read_gpus` is the GPU backend's `telemetry`, run in a
    worker thread."""

    def __init__(
        self,
        read_gpus: Callable[[], list[GpuTelemetry]],
        *,
        disabled: bool = False,
        every: float = 5.0,
        read_host: Callable[[bool], dict[str, Any]] = read_host,
    ) -> None:
        self._read_gpus = read_gpus
        self._read_host = read_host
        self.disabled = disabled
        self.every = every
        self.samples: deque[Sample] = deque(maxlen=self._capacity())
        self._task: asyncio.Task[None] | None = None
        self._first: asyncio.Future[None] | None = None
        self._last_read = 0.0
        self.taken = 0  # samples taken since the daemon started (tests, operators)
        self._gpu_failed = False

    def _capacity(self) -> int:
        return max(1, int(RING_SECONDS / self.every))

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def wanted(self) -> None:
        """A reader came: sample from now on (the first sample at once) until none comes for
        `IDLE_S`; returns once a first sample is there."""
        if self.disabled:
            return
        loop = asyncio.get_running_loop()
        self._last_read = loop.time()
        if not self.running:
            self._first = loop.create_future()
            self._task = asyncio.ensure_future(self._run())
        if self._first is not None and not self._first.done():
            await asyncio.shield(self._first)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        log.info("performance sampling started (every %gs)", self.every)
        first = True
        try:
            while loop.time() - self._last_read < IDLE_S:
                started = loop.time()
                await self._sample(first)
                if first and self._first is not None and not self._first.done():
                    self._first.set_result(None)
                first = False
                await asyncio.sleep(max(0.0, self.every - (loop.time() - started)))
            log.info("performance sampling stopped: nobody asked for %gs", IDLE_S)
        finally:
            if self._first is not None and not self._first.done():
                self._first.set_result(None)

    async def _sample(self, first: bool) -> None:
        host: dict[str, Any] | None
        try:
            host = await asyncio.to_thread(self._read_host, first)
        except Exception as exc:
            log.warning("reading the host's figures failed: %s", exc)
            host = None
        try:
            gpus = tuple(gpu_stat(g) for g in await asyncio.to_thread(self._read_gpus))
            self._gpu_failed = False
        except Exception as exc:
            if not self._gpu_failed:  # once until it works again
                log.warning("reading the GPUs' figures failed: %s", exc)
            self._gpu_failed = True
            gpus = ()
        self.samples.append(Sample(datetime.now(UTC), host, gpus))
        self.taken += 1

    def document(self, after: datetime | None = None) -> bytes:
        """llama-swap's `/api/performance` body: every sample kept (after `after`)."""
        kept = [s for s in self.samples if after is None or s.at > after]
        sys_stats = [{"timestamp": _stamp(s.at), **s.host} for s in kept if s.host is not None]
        gpu_stats = [{"timestamp": _stamp(s.at), **g} for s in kept for g in s.gpus]
        return _encode({"enabled": True, "sys_stats": sys_stats, "gpu_stats": gpu_stats})

    def latest(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    def reconfigure(self, disabled: bool, every: float) -> None:
        """A reload: a new interval takes effect at the next sample; off stops sampling."""
        if every != self.every:
            self.every = every
            self.samples = deque(self.samples, maxlen=self._capacity())
        self.disabled = disabled
        if disabled:
            self.stop()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


_GPU_FIGURES = (
    ("llamaswap_gpu_temperature_celsius", "GPU temperature in Celsius", "temp_c", 1),
    ("llamaswap_gpu_vram_temperature_celsius", "GPU VRAM temperature in Celsius", "vram_temp_c", 1),
    ("llamaswap_gpu_util_percent", "GPU utilization percent (0-100)", "gpu_util_pct", 1),
    (
        "llamaswap_gpu_memory_util_percent",
        "GPU memory utilization percent (0-100)",
        "mem_util_pct",
        1,
    ),
    ("llamaswap_gpu_memory_used_bytes", "GPU memory used in bytes", "mem_used_mb", MB),
    ("llamaswap_gpu_memory_total_bytes", "GPU memory total in bytes", "mem_total_mb", MB),
    ("llamaswap_gpu_fan_speed_percent", "GPU fan speed percent (0-100)", "fan_speed_pct", 1),
    ("llamaswap_gpu_power_draw_watts", "GPU power draw in watts", "power_draw_w", 1),
)


class PerformanceFigures(Collector):
    """llama-swap's `llamaswap_*` series on `/metrics`, from the latest sample: its names,
    labels and help texts, so its example Grafana dashboard works unchanged."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def collect(self) -> Iterator[Metric]:
        sample = self.sampler.latest()
        if sample is None or self.sampler.disabled:
            return
        if sample.host is not None:
            yield from _host_families(sample.host)
        if sample.gpus:
            for name, help_text, key, scale in _GPU_FIGURES:
                family = GaugeMetricFamily(name, help_text, labels=["id", "name", "uuid"])
                for gpu in sample.gpus:
                    labels = [str(gpu["id"]), gpu["name"], gpu["uuid"]]
                    family.add_metric(labels, float(gpu[key]) * scale)
                yield family


def _host_families(host: dict[str, Any]) -> Iterator[Metric]:
    cpu = GaugeMetricFamily(
        "llamaswap_cpu_util_percent", "CPU utilization per core (0-100)", labels=["core"]
    )
    for core, pct in enumerate(host["cpu_util_per_core"]):
        cpu.add_metric([str(core)], pct)
    yield cpu
    for name, help_text, key in (
        ("llamaswap_memory_total_bytes", "Total memory in bytes", "mem_total_mb"),
        ("llamaswap_memory_used_bytes", "Used memory in bytes", "mem_used_mb"),
        ("llamaswap_memory_free_bytes", "Free memory in bytes", "mem_free_mb"),
        ("llamaswap_swap_total_bytes", "Total swap in bytes", "swap_total_mb"),
        ("llamaswap_swap_used_bytes", "Used swap in bytes", "swap_used_mb"),
    ):
        yield GaugeMetricFamily(name, help_text, value=float(host[key] * MB))
    load = GaugeMetricFamily("llamaswap_load_average", "Load average", labels=["interval"])
    for interval, key in (("1m", "load_avg_1"), ("5m", "load_avg_5"), ("15m", "load_avg_15")):
        load.add_metric([interval], host[key])
    yield load
    if host["net_io"]:
        net = CounterMetricFamily(
            "llamaswap_network_bytes",
            "Total network bytes transferred",
            labels=["interface", "direction"],
        )
        for io in host["net_io"]:
            net.add_metric([io["name"], "recv"], float(io["bytes_recv"]))
            net.add_metric([io["name"], "sent"], float(io["bytes_sent"]))
        yield net
