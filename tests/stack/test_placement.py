"""Placement by memory (`gpus: auto`) through the real stack: circusd, daemon, proxy and
fake_model upstreams on loopback.

No GPU here: the fake GPU backend stands for NVML (SWAPD_GPU_BACKEND=fake). Each upstream declares
the GPU memory it holds for itself (`--gpu-mem`, and `POST /gpu-mem?bytes=N` to grow), and the fake
reports it as NVML's per-process memory on the GPUs its CUDA_VISIBLE_DEVICES names, so the daemon
learns and places exactly as it would from NVML.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from swapd.daemon.machinery.gpu_fake import fake_uuid
from tests.support.daemon import chat
from tests.support.placement import GIB, config, gpu_env, learned, states
from tests.support.stack import fake_model_cmd, http_get, wait_for

pytestmark = pytest.mark.processes


def test_two_that_fit_share_a_gpu_and_a_third_evicts_only_the_least_recently_used(
    stack_factory,
) -> None:
    # 8 GiB, less the 0.5 GiB margin: two 3 GiB models fit, a third does not.
    spec = {"mem_gib": 3, "vram": "3GiB"}
    stack = stack_factory(config({"a": spec, "b": spec, "c": spec}), env=gpu_env(8))
    chat(stack.url, "a")
    chat(stack.url, "b")
    now = states(stack)
    assert now["a"]["state"] == now["b"]["state"] == "ready"
    for mid in ("a", "b"):
        env = psutil.Process(now[mid]["pid"]).environ()
        assert env["CUDA_VISIBLE_DEVICES"] == fake_uuid(0)
        assert now[mid]["placed_by_memory"]
    learned(stack, "a", 3)
    learned(stack, "b", 3)
    # `a` is used again, so `b` is the least recently used one.
    chat(stack.url, "a")
    wait_for(
        lambda: (s := states(stack))["a"]["last_activity"] > s["b"]["last_activity"],
        timeout=10,
        what="a's newer activity to reach the daemon",
    )
    chat(stack.url, "c")
    after = states(stack)
    assert after["b"]["state"] == "stopped" and "swapped out for c" in after["b"]["reason"]
    assert after["a"]["state"] == after["c"]["state"] == "ready"
    assert after["a"]["pid"] == now["a"]["pid"]  # never restarted
    gpus = stack.status()["gpus"]
    assert gpus[0]["reserved_bytes"] == 6 * GIB  # a and c, 3 GiB each
    # What an operator sees: `swapd status` and the proxy's /running.
    learned(stack, "c", 3)
    text = stack.swapd("status").stdout
    assert "c: footprint 3.0 GiB on GPU 0 (placed by memory, from: measured)" in text
    assert "reserved 3.0 GiB on GPU 0" in text
    assert "6144 MiB reserved" in text
    status, body = http_get(stack.url + "/running")
    running = {item["model"]: item for item in json.loads(body)["running"]}
    assert status == 200 and set(running) == {"a", "c"}
    assert running["a"]["gpus"] == [fake_uuid(0)]
    assert running["a"]["footprint"] == {fake_uuid(0).casefold(): 3 * GIB}
    assert running["a"]["reserved"] == {fake_uuid(0).casefold(): 3 * GIB}
    (gpu,) = json.loads(body)["gpus"]
    assert gpu["uuid"] == fake_uuid(0) and gpu["total_bytes"] == 8 * GIB
    assert gpu["reserved_bytes"] == 6 * GIB
    assert gpu["used_bytes"] == 6 * GIB and gpu["free_bytes"] == 2 * GIB  # a and c, as NVML has it


def test_a_model_that_grew_after_start_is_corrected(stack_factory) -> None:
    stack = stack_factory(
        config({"grows": {"mem_gib": 2, "vram": "2GiB"}, "other": {"mem_gib": 3, "vram": "3GiB"}}),
        env=gpu_env(8),
    )
    chat(stack.url, "grows")
    learned(stack, "grows", 2)
    port = states(stack)["grows"]["port"]
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/gpu-mem?bytes={5 * GIB}", data=b"", method="POST"
    )
    urllib.request.urlopen(request, timeout=5).close()
    grown = learned(stack, "grows", 5)
    assert grown["reserved"] == {fake_uuid(0).casefold(): 5 * GIB}
    # 2 + 3 GiB would have fit in 7.5; 5 + 3 does not, so `other` evicts it.
    chat(stack.url, "other")
    after = states(stack)
    assert after["grows"]["state"] == "stopped" and after["other"]["state"] == "ready"


def test_a_restart_keeps_the_learned_footprints(stack_factory, tmp_path: Path) -> None:
    state = tmp_path / "state"
    models = config({"a": {"mem_gib": 3}, "b": {"mem_gib": 3, "vram": "3GiB"}})
    first = stack_factory(models, env=gpu_env(8, state))
    chat(first.url, "a")  # never measured, no hint: its GPU is cleared for it
    learned(first, "a", 3)
    assert states(first)["a"]["footprint_source"] == "measured"
    first.stop()
    assert (state / "footprints.json").exists()

    second = stack_factory(models, env=gpu_env(8, state))
    before = states(second)["a"]
    assert before["state"] == "stopped"
    assert before["footprint"] == {fake_uuid(0).casefold(): 3 * GIB}
    assert before["footprint_source"] == "measured"
    chat(second.url, "a")
    chat(second.url, "b")  # with a's measured 3 GiB the two share the GPU
    now = states(second)
    assert now["a"]["state"] == now["b"]["state"] == "ready"


def test_no_room_says_how_much_is_needed_and_what_holds_it(stack_factory) -> None:
    stack = stack_factory(config({"huge": {"mem_gib": 1, "vram": "20GiB"}}), env=gpu_env(8))
    with pytest.raises(urllib.error.HTTPError) as caught:
        chat(stack.url, "huge")
    assert caught.value.code == 503
    error = json.loads(caught.value.read())["error"]
    assert "huge needs 20.0 GiB" in error["message"]
    assert "GPU 0 (8.0 GiB)" in error["message"]


def test_gpus_fills_cmd_and_env_with_the_placed_gpus(stack_factory) -> None:
    models = config({"named": {"mem_gib": 1, "vram": "1GiB", "env": ["PLACED_ON=${GPUS}"]}})
    models["models"]["named"]["cmd"] = fake_model_cmd("named-${GPUS}", "--gpu-mem", str(GIB))
    stack = stack_factory(models, env=gpu_env(8))
    served = chat(stack.url, "named")["served_by"]
    assert served["name"] == f"named-{fake_uuid(0)}"
    env = psutil.Process(states(stack)["named"]["pid"]).environ()
    assert env["PLACED_ON"] == env["CUDA_VISIBLE_DEVICES"] == fake_uuid(0)
