"""GPUs through the real stack (circusd, daemon, proxy, fake_model upstreams), with the fake GPU
backend standing for NVML: it lists the model processes the daemon really started on the GPUs
their CUDA_VISIBLE_DEVICES names, so placement, swapping by GPU and the release check after a stop
run exactly as they would against NVML."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from swapd.daemon.machinery.gpu_fake import fake_uuid
from tests.support.daemon import chat
from tests.support.stack import FAKE_GPU_SCOPE_ENV, fake_model_cmd, free_port_range

pytestmark = pytest.mark.processes


# The stack scopes the fake GPUs to its own token (SWAPD_FAKE_GPU_SCOPE), so parallel runs do not
# see each other's processes.
GPU_ENV = {"SWAPD_GPU_BACKEND": "fake", "SWAPD_FAKE_GPUS": "2"}


def config(models: dict[str, dict[str, object]]) -> dict[str, object]:
    base = {"proxy": "http://127.0.0.1:${PORT}", "unloadTimeout": 3}
    return {
        "healthCheckTimeout": 15,
        # Below the ephemeral range: a client socket could take a model's port up there.
        "startPort": free_port_range(len(models)),
        "models": {
            mid: {"cmd": fake_model_cmd(mid), **base, **spec} for mid, spec in models.items()
        },
    }


def test_disjoint_gpus_run_side_by_side_and_overlapping_ones_swap(stack_factory) -> None:
    stack = stack_factory(
        config({"left": {"gpus": [0]}, "right": {"gpus": [fake_uuid(1)]}, "other": {"gpus": [0]}}),
        env=GPU_ENV,
    )
    assert chat(stack.url, "left")["served_by"]["name"] == "left"
    assert chat(stack.url, "right")["served_by"]["name"] == "right"
    status = {m["model"]: m for m in stack.status()["models"]}
    assert status["left"]["state"] == "ready" and status["right"]["state"] == "ready"
    left_env = psutil.Process(status["left"]["pid"]).environ()
    assert left_env["CUDA_VISIBLE_DEVICES"] == "0"
    assert psutil.Process(status["right"]["pid"]).environ()["CUDA_VISIBLE_DEVICES"] == fake_uuid(1)

    assert chat(stack.url, "other")["served_by"]["name"] == "other"
    status = {m["model"]: m for m in stack.status()["models"]}
    assert status["left"]["state"] == "stopped"
    assert status["right"]["state"] == "ready"
    assert status["other"]["state"] == "ready"
    assert status["left"]["gpu_lingering"] == []


@pytest.fixture
def stray() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_process_left_on_the_gpu_after_a_stop_is_reported(stack_factory, stray) -> None:
    # A docker-like model (cmdStop, gpus): its server is not the daemon's child, so after a stop
    # any process on its GPU counts. Here a stray process outlives the container on GPU 1.
    # The release wait is cut to 1 s (default 10 s): the stray never leaves, so the stop would
    # otherwise sit out the whole default before reporting it.
    stack = stack_factory(
        config({"boxed": {"gpus": [1], "cmdStop": "kill ${PID}"}}),
        env={**GPU_ENV, "SWAPD_GPU_RELEASE_TIMEOUT": "1"},
    )
    chat(stack.url, "boxed")
    code = "import time\nprint('ready', flush=True)\ntime.sleep(120)\n"
    env = {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "1", FAKE_GPU_SCOPE_ENV: stack.token}
    env["SWAPD_FAKE_GPU_MEM"] = "123456"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    stray.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"

    stack.swapd("unload", "boxed", timeout=60)
    entry = stack.model("boxed")
    assert entry["state"] == "stopped"
    assert entry["gpu_lingering"] == [{"gpu": fake_uuid(1), "pid": proc.pid, "used_bytes": 123456}]
    assert f"pid {proc.pid} on {fake_uuid(1)}" in stack.output()
