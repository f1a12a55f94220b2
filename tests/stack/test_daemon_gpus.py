"""GPUs through the daemon, with the fake NVML backend (`SWAPD_GPU_BACKEND=fake`, which stands
for NVML on this GPU-less machine and lists real processes by their CUDA_VISIBLE_DEVICES):
disjoint `gpus` run side by side, `CUDA_VISIBLE_DEVICES` is set, a model without `gpus` takes
them all, and a process still holding a GPU after a stop is reported as lingering."""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest

from tests.support.daemon import chat, config
from tests.support.stack import PYTHON, UPSTREAMS, docker_like_force_stop, fake_model_cmd

pytestmark = pytest.mark.processes


def gpu_env(scope: str) -> dict[str, str]:
    return {
        "SWAPD_GPU_BACKEND": "fake",
        "SWAPD_FAKE_GPUS": "2",
        "SWAPD_FAKE_GPU_SCOPE": scope,
        "SWAPD_GPU_RELEASE_TIMEOUT": "1",
    }


def model_env(url: str, model: str) -> dict[str, str]:
    with urllib.request.urlopen(f"{url}/upstream/{model}/env", timeout=30) as response:
        return json.loads(response.read())


def test_disjoint_gpus_coexist_and_all_gpus_swap(stack_factory) -> None:
    stack = stack_factory(
        config(
            {
                "g0": {"cmd": fake_model_cmd("g0"), "gpus": [0]},
                "g1": {"cmd": fake_model_cmd("g1"), "gpus": [1]},
                "whole": {"cmd": fake_model_cmd("whole")},
            }
        ),
        env=gpu_env(uuid.uuid4().hex),
    )
    assert model_env(stack.url, "g0")["CUDA_VISIBLE_DEVICES"] == "0"
    assert model_env(stack.url, "g1")["CUDA_VISIBLE_DEVICES"] == "1"
    states = {m["model"]: m for m in stack.status()["models"]}
    assert states["g0"]["state"] == states["g1"]["state"] == "ready"
    assert states["g0"]["gpus"] == ["0"]
    assert [g["index"] for g in stack.status()["gpus"]] == [0, 1]

    assert "CUDA_VISIBLE_DEVICES" not in model_env(stack.url, "whole")
    states = {m["model"]: m["state"] for m in stack.status()["models"]}
    assert states == {"g0": "stopped", "g1": "stopped", "whole": "ready"}


def test_a_process_still_on_the_gpu_after_a_stop_is_reported(stack_factory, tmp_path) -> None:
    state = str(tmp_path / "docker-state")
    name = f"swapd-gpu-{uuid.uuid4().hex[:8]}"
    # Stands for `docker run --gpus`: no real engine here can give a container a GPU.
    docker = f"{PYTHON} {UPSTREAMS / 'docker_like.py'}"
    stack = stack_factory(
        config(
            {
                # A cmdStop that does not stop the container: its server keeps GPU 0.
                "stuck": {
                    "cmd": f"{docker} run --name {name} -- " + fake_model_cmd("stuck"),
                    "cmdStop": "true ${PID}",
                    "gpus": [0],
                    "unloadTimeout": 1,
                },
            }
        ),
        env={**gpu_env(uuid.uuid4().hex), "DOCKER_LIKE_STATE": state},
    )
    try:
        container = chat(stack.url, "stuck")["served_by"]["pid"]
        stack.swapd("unload", "stuck")
        entry = stack.model("stuck")
        assert entry["state"] == "stopped"
        assert container in [p["pid"] for p in entry["gpu_lingering"]]
        assert f"LINGERING pid {container}" in stack.swapd("status").stdout
        assert "GPU memory is still held" in stack.output()
    finally:
        docker_like_force_stop(name, state)
