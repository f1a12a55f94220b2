"""swapd's Prometheus figures, in one registry in the daemon (prometheus-client): the requests
every proxy process reported (from their activity records, so each request counts once whichever
process served it), and the daemon's own (starts, swaps and their phases, failures, crashes,
back-offs, TTL unloads, and at scrape time the per-model gauges; GPU memory and placement by memory
in gpu_metrics.py).

Names are `swapd_*`; label `model` is a model id (a peer's requests as `peer/model`; a request
naming a model the config does not have as `(other)`, request_figures.py), `route` one of model,
upstream, comfyui, peer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ...ipc.activity import ActivityRecord
from ...ipc.model_status import GpuInfo, ModelStatus
from ...ipc.states import AWAKE_STATES
from .gpu_metrics import GpuCollector, GpuGauges, PlacementCounts
from .request_figures import RequestFigures

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_PHASES = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


@dataclass
class Gauges:
    """What the collector reads at scrape time (the daemon fills the callables)."""

    models: Callable[[], Iterable[ModelStatus]] = lambda: ()
    waiting: dict[str, int] = field(default_factory=dict)
    gpus: Callable[[], Iterable[GpuInfo]] = lambda: ()


class _Live(Collector):
    def __init__(self, gauges: Gauges) -> None:
        self.gauges = gauges

    def collect(self) -> Iterable[GaugeMetricFamily]:
        loaded = GaugeMetricFamily(
            "swapd_model_loaded",
            "1 while the model is loaded (any state but stopped, failed and asleep)",
            labels=["model"],
        )
        residual = GaugeMetricFamily(
            "swapd_model_asleep_residual_bytes",
            "GPU memory an asleep model's processes still hold (NVML), by GPU UUID",
            labels=["model", "gpu"],
        )
        last_sleep = GaugeMetricFamily(
            "swapd_model_last_sleep_seconds",
            "how long the model's last sleep took (its calls and the memory's release)",
            labels=["model"],
        )
        last_wake = GaugeMetricFamily(
            "swapd_model_last_wake_seconds",
            "how long the model's last wake took (its calls and its health check)",
            labels=["model"],
        )
        state = GaugeMetricFamily(
            "swapd_model_state", "1 for the model's current state", labels=["model", "state"]
        )
        in_flight = GaugeMetricFamily(
            "swapd_in_flight_requests",
            "requests being served by the model, summed over every proxy process",
            labels=["model"],
        )
        waiting = GaugeMetricFamily(
            "swapd_queue_depth",
            "requests waiting for the model to be ready (a start, a swap, a drain)",
            labels=["model"],
        )
        linger_port = GaugeMetricFamily(
            "swapd_lingering_port",
            "1 while a stopped model's port is still listened on (see docs/operations.md)",
            labels=["model", "port"],
        )
        linger_gpu = GaugeMetricFamily(
            "swapd_lingering_gpu_processes",
            "processes still holding GPU memory after the model stopped",
            labels=["model"],
        )
        for st in self.gauges.models():
            loaded.add_metric([st.model], 1.0 if st.state in AWAKE_STATES else 0.0)
            sleep = st.sleep
            if sleep is not None:
                # Not measured (no GPU inventory): no sample, rather than a 0 no one read.
                for gpu, held in sorted((sleep.residual or {}).items()):
                    residual.add_metric([st.model, gpu], float(held))
                if sleep.last_sleep_s is not None:
                    last_sleep.add_metric([st.model], sleep.last_sleep_s)
                if sleep.last_wake_s is not None:
                    last_wake.add_metric([st.model], sleep.last_wake_s)
            state.add_metric([st.model, st.state], 1.0)
            in_flight.add_metric([st.model], float(st.in_flight))
            waiting.add_metric([st.model], float(self.gauges.waiting.get(st.model, 0)))
            if st.lingering is not None:
                linger_port.add_metric([st.model, str(st.lingering.port)], 1.0)
            linger_gpu.add_metric([st.model], float(len(st.gpu_lingering)))
        yield from (loaded, state, in_flight, waiting, linger_port, linger_gpu)
        yield from (residual, last_sleep, last_wake)


class Metrics:
    """Two registries. `registry`: collectors that read the daemon's state at scrape time (the
    per-model gauges, GPUs, captures), collected on the daemon's loop, where that state lives.
    `counted`: prometheus-client's own counters and histograms, which are thread-safe, collected
    and rendered in a worker thread with the request figures (`exposition`)."""

    def __init__(self, placement: PlacementCounts | None = None) -> None:
        self.registry = CollectorRegistry()
        self.gauges = Gauges()
        self.registry.register(_Live(self.gauges))
        # GPU memory and placement by memory (gpu_metrics.py); `placement`: the GPU ledger's
        # counts (None without a GPU inventory).
        self.gpu = GpuGauges(
            gpus=lambda: self.gauges.gpus(),
            models=lambda: self.gauges.models(),
            counts=lambda: placement,
        )
        self.registry.register(GpuCollector(self.gpu))
        self.counted = registry = CollectorRegistry()
        self.request_figures = RequestFigures()
        self.starts = Counter(
            "swapd_model_starts",
            "model starts, by result (ok, failed)",
            ["model", "result"],
            registry=registry,
        )
        self.phase = Histogram(
            "swapd_swap_phase_seconds",
            "time spent in each phase of a start or swap: drain, stop (of a model evicted or "
            "unloaded), start (spawn to a running process), health (to the first 200), sleep "
            "(its server's sleep calls and the GPU memory's release), wake (its wake calls and "
            "health check), verify (its wakeProbe), kv_save and kv_restore (its conversation "
            "caches, kvCache)",
            ["model", "phase"],
            buckets=_PHASES,
            registry=registry,
        )
        self.swaps = Counter(
            "swapd_swaps", "starts that stopped other models first", ["model"], registry=registry
        )
        self.stops = Counter(
            "swapd_model_stops",
            "models stopped, by cause (swap, unload, ttl, reload, shutdown, crash, unhealthy, "
            "sleep_failed, wake_failed, wake_unverified, asleep_ttl)",
            ["model", "cause"],
            registry=registry,
        )
        self.sleeps = Counter(
            "swapd_model_sleeps",
            "models put to sleep, by result (ok; failed: stopped instead)",
            ["model", "result"],
            registry=registry,
        )
        self.wakes = Counter(
            "swapd_model_wakes",
            "asleep models woken, by result (ok; failed, or unverified: its wakeProbe failed; "
            "either way stopped and started cold instead)",
            ["model", "result"],
            registry=registry,
        )
        self.kv_saves = Counter(
            "swapd_kv_saves",
            "kvCache saves of a model's conversation caches before its stop or sleep, by result "
            "(ok; failed: an error, a timeout or no disk space, and it stopped without)",
            ["model", "result"],
            registry=registry,
        )
        self.kv_restores = Counter(
            "swapd_kv_restores",
            "kvCache restores after a start or wake, by result (ok; failed: it served with a "
            "full prefill; short: it brought back less than was saved)",
            ["model", "result"],
            registry=registry,
        )
        self.kv_bytes = Counter(
            "swapd_kv_bytes",
            "bytes of conversation caches saved (phase kv_save) and restored (kv_restore)",
            ["model", "phase"],
            registry=registry,
        )
        self.crashes = Counter(
            "swapd_model_crashes",
            "ready models whose process exited on its own",
            ["model"],
            registry=registry,
        )
        self.backoffs = Counter(
            "swapd_model_backoffs",
            "times a model entered back-off after repeated failed starts",
            ["model"],
            registry=registry,
        )
        self.ttl_unloads = Counter(
            "swapd_ttl_unloads",
            "models unloaded (or put to sleep) because their TTL passed",
            ["model"],
            registry=registry,
        )

    @contextlib.contextmanager
    def waiting_for(self, model: str) -> Iterator[None]:
        """An `Ensure` waiting for `model` (the queue depth)."""
        waiting = self.gauges.waiting
        waiting[model] = waiting.get(model, 0) + 1
        try:
            yield
        finally:
            waiting[model] -= 1

    def records(self, records: Iterable[ActivityRecord]) -> None:
        self.request_figures.add(records)

    async def exposition(self) -> bytes:
        """The Prometheus text. On the loop: `registry`'s collectors (a few samples per model)
        and a copy of the request figures (`RequestFigures.frozen`: 0.5 ms for 50 models with
        requests on two routes and four statuses); in a worker thread: collecting the counters,
        histograms and the copy, and formatting every line (40 ms for those 50 models). So a
        scrape keeps the loop for the copy, not for the rendering (benchmarks/
        hostile_clients.py, the daemon's stall during a scrape)."""
        live = list(self.registry.collect())
        requests = self.request_figures.frozen()
        return await asyncio.to_thread(_render, live, self.counted, requests)


class _Families(Collector):
    def __init__(self, live: list[Metric], counted: CollectorRegistry, requests: Collector) -> None:
        self.parts = (live, counted, requests)

    def collect(self) -> Iterator[Metric]:
        live, counted, requests = self.parts
        yield from live
        yield from counted.collect()
        yield from requests.collect()


def _render(live: list[Metric], counted: CollectorRegistry, requests: Collector) -> bytes:
    return generate_latest(_Families(live, counted, requests))
