"""The performance sampler against the real stack, with the fake GPU backend standing for NVML
(`SWAPD_GPU_BACKEND=fake`: two GPUs; a process whose CUDA_VISIBLE_DEVICES names one is busy on
it): nothing is sampled until someone asks; `/api/performance` and `/api/hardware` in the shapes
llama-swap's UI reads; `/metrics` with the `llamaswap_*` series llama-swap's example Grafana
dashboard reads, each with the labels it uses; a model's GPU shows up in the figures; and
`performance.disabled` (here by a reload) as llama-swap answers it."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support import llama_ui
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.processes

# mostlygeek/llama-swap docs/grafana/example-dashboard.json: every series its panels query, and
# the labels their legends and filters use (Prometheus adds `instance` itself).
DASHBOARD: dict[str, set[str]] = {
    "llamaswap_cpu_util_percent": {"core"},
    "llamaswap_load_average": {"interval"},
    "llamaswap_memory_used_bytes": set(),
    "llamaswap_memory_free_bytes": set(),
    "llamaswap_memory_total_bytes": set(),
    "llamaswap_swap_used_bytes": set(),
    "llamaswap_gpu_util_percent": {"name"},
    "llamaswap_gpu_memory_util_percent": {"name"},
    "llamaswap_gpu_temperature_celsius": {"name"},
    "llamaswap_gpu_power_draw_watts": {"name"},
    "llamaswap_gpu_fan_speed_percent": {"name"},
}
# `rate(llamaswap_network_bytes_total{direction="recv"|"sent"}[1m])`, legend `{{interface}}`.
NETWORK = "llamaswap_network_bytes_total"


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    (port,) = model_ports(1)
    return stack_factory(_config(port), env={"SWAPD_GPU_BACKEND": "fake", "SWAPD_FAKE_GPUS": "2"})


def _config(port: int) -> dict[str, Any]:
    return {"healthCheckTimeout": 15, "models": {"m": {**local_model("m", port), "gpus": [1]}}}


def _get(stack: Stack, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(stack.url + path, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _figures(stack: Stack) -> dict[str, Any]:
    return dict(stack.status()["performance"])


def test_performance_hardware_and_metrics_as_llama_swap_serves_them(stack: Stack) -> None:
    # Nobody asked yet: nothing is sampled (the idle daemon reads neither /proc nor NVML).
    assert _figures(stack) == {"disabled": False, "every": 5.0, "sampling": False,
                               "samples_taken": 0}  # fmt: skip
    status, body = _get(stack, "/api/performance")
    assert status == 200
    doc = json.loads(body)
    llama_ui.check(doc, llama_ui.PERFORMANCE, "/api/performance")
    assert doc["enabled"] is True and doc["sys_stats"]
    assert [g["uuid"] for g in doc["gpu_stats"][:2]] == [
        "GPU-00000000-0000-4000-8000-000000000000",
        "GPU-00000000-0000-4000-8000-000000000001",
    ]
    assert _figures(stack)["sampling"] is True
    # `fetchPerformance(after)` asks for what came after the newest sample it has.
    newest = doc["sys_stats"][-1]["timestamp"]
    status, body = _get(stack, f"/api/performance?after={urllib.parse.quote(newest)}")
    assert status == 200 and all(s["timestamp"] > newest for s in json.loads(body)["sys_stats"])
    status, body = _get(stack, "/api/performance?after=yesterday")
    error = json.loads(body)
    assert status == 400 and error["error"]["message"] == (
        "invalid 'after' timestamp, use RFC3339 format"
    )

    status, body = _get(stack, "/api/hardware")
    assert status == 200
    snapshot = json.loads(body)
    llama_ui.check(snapshot, llama_ui.HARDWARE, "/api/hardware")
    assert [a["vendor"] for a in snapshot["accelerators"]] == ["NVIDIA", "NVIDIA"]

    status, body = _get(stack, "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    for name, labels in DASHBOARD.items():
        samples = families[name].samples
        assert samples, name
        assert all(labels <= set(s.labels) for s in samples), (name, samples[0].labels)
    network = [s for f in families.values() for s in f.samples if s.name == NETWORK]
    assert network and {s.labels["direction"] for s in network} == {"recv", "sent"}
    assert "swapd_model_loaded" in families  # swapd's own beside them


def test_a_models_gpu_shows_in_the_figures_and_disabled_answers_503(stack: Stack) -> None:
    def gpu1(stats: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [g for g in stats if g["id"] == 1]

    _get(stack, "/api/performance")  # sampling from now on
    assert _get(stack, "/upstream/m/health")[0] == 200  # m runs on GPU 1
    taken = _figures(stack)["samples_taken"]

    def busy() -> list[dict[str, Any]] | None:
        stats = gpu1(json.loads(_get(stack, "/api/performance")[1])["gpu_stats"])
        return [g for g in stats if g["mem_used_mb"] > 0] or None

    found = wait_for(busy, 20, what="a sample of GPU 1 busy (one every 5 s)")
    assert found is not None
    sample = found[0]
    assert sample["gpu_util_pct"] == 100.0 and _figures(stack)["samples_taken"] > taken

    config = yaml.safe_load(stack.config_path.read_text())
    stack.write_config({**config, "performance": {"disabled": True}})
    stack.swapd("reload")
    assert _figures(stack)["disabled"] is True and _figures(stack)["sampling"] is False
    status, body = _get(stack, "/api/performance")
    assert (status, json.loads(body)) == (503, {"enabled": False})
    assert b"llamaswap_" not in _get(stack, "/metrics")[1]
