"""Honest figures through the real stack: with no GPU inventory (the `none` backend: no NVML, no
fake GPU), a model put to sleep has nothing measured, and every surface says so: the daemon's
log, `swapd status` and its `--json`, `/api/status`, `/running` and `/metrics` say "not measured"
(null in JSON, no sample), never "0.00 GiB" or "holding nothing on the GPUs" as if NVML had read
it. The UI's words for it are held by tests/unit/test_not_measured.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.daemon import chat
from tests.support.sleeping import config, vllm_model
from tests.support.stack import Stack, http_get

pytestmark = pytest.mark.processes


def test_without_a_gpu_inventory_every_surface_says_not_measured(
    stack_factory, tmp_path: Path
) -> None:
    log = tmp_path / "vllm.jsonl"
    model = vllm_model("a", log)
    del model["gpus"]  # no GPU to name: there is no inventory
    stack: Stack = stack_factory(config({"a": model}), env={"SWAPD_GPU_BACKEND": "none"})
    chat(stack.url, "a")
    assert stack.swapd("sleep", "a").stdout.strip() == "a is asleep"
    stack.wait_state("a", "asleep")
    # The daemon's log.
    output = stack.output()
    assert "a asleep in" in output and "(GPU memory: not measured (no GPU inventory))" in output
    assert "0.00 GiB" not in output
    # `swapd status`, as a table and as JSON.
    text = stack.swapd("status").stdout
    assert "GPUs: not measured (no GPU inventory)" in text
    assert "a: sleep vllm; asleep, its GPU memory not measured (no GPU inventory)" in text
    assert "holding nothing" not in text
    listed = json.loads(stack.swapd("status", "--json").stdout)
    [a] = [m for m in listed["models"] if m["model"] == "a"]
    assert (a["sleep"]["residual"], a["sleep"]["held_before"]) == (None, None)
    # `/api/status` and `/running`.
    _, status = stack.get_json("/api/status")
    [a] = [m for m in status["models"] if m["model"] == "a"]
    assert (a["sleep"]["residual"], a["sleep"]["held_before"]) == (None, None)
    _, running = stack.get_json("/running")
    assert running["asleep"][0]["sleep"]["residual"] is None
    # `/metrics`: no residual sample for a figure no one read.
    metrics = http_get(stack.url + "/metrics")[1].decode()
    assert "swapd_model_asleep_residual_bytes{" not in metrics
    assert 'swapd_model_sleeps_total{model="a",result="ok"} 1.0' in metrics
