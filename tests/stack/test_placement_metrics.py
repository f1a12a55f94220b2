"""The GPU and placement families of `GET /metrics`, parsed with prometheus-client's own parser,
against the real stack (circusd, daemon, proxy, fake_model upstreams on loopback).

No GPU here: the fake GPU backend stands for NVML (SWAPD_GPU_BACKEND=fake). Each upstream declares
the GPU memory it holds (`--gpu-mem`, `POST /gpu-mem?bytes=N` to grow) and the fake reports it as
NVML's per-process memory on the GPUs its CUDA_VISIBLE_DEVICES names, so the figures come from the
same readings as on a real GPU.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from swapd.daemon.machinery.gpu_fake import fake_uuid
from tests.support.daemon import chat
from tests.support.placement import GIB, config, gpu_env, learned, states
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.processes

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(stack: Stack) -> Samples:
    with urllib.request.urlopen(stack.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: Samples, family: str, **labels: str) -> float | None:
    return samples.get((family, tuple(sorted(labels.items()))))


def test_gpu_memory_footprints_placements_and_evictions_are_on_metrics(stack_factory) -> None:
    spec = {"mem_gib": 3, "vram": "3GiB"}
    models = {"a": spec, "b": spec, "c": spec, "huge": {"mem_gib": 1, "vram": "20GiB"}}
    stack = stack_factory(config(models), env=gpu_env(8))
    gpu = {"gpu": "0", "name": "Fake 0", "uuid": fake_uuid(0)}
    on0 = {"gpu": "0", "uuid": fake_uuid(0)}
    chat(stack.url, "a")
    chat(stack.url, "b")
    learned(stack, "a", 3)
    learned(stack, "b", 3)
    chat(stack.url, "a")  # b is now the least recently used
    wait_for(
        lambda: (s := states(stack))["a"]["last_activity"] > s["b"]["last_activity"],
        timeout=10,
        what="a's newer activity to reach the daemon",
    )
    chat(stack.url, "c")  # 8 GiB less the 0.5 GiB margin holds two: b makes room
    learned(stack, "c", 3)
    with pytest.raises(urllib.error.HTTPError) as caught:
        chat(stack.url, "huge")
    assert caught.value.code == 503

    m = scrape(stack)
    assert value(m, "swapd_gpu_memory_total_bytes", **gpu) == 8 * GIB
    assert value(m, "swapd_gpu_memory_used_bytes", **gpu) == 6 * GIB  # a and c
    assert value(m, "swapd_gpu_memory_free_bytes", **gpu) == 2 * GIB
    assert value(m, "swapd_gpu_memory_reserved_bytes", **gpu) == 6 * GIB
    for model in ("a", "b", "c"):  # learned footprints stay after a stop (b)
        assert value(m, "swapd_model_gpu_footprint_bytes", model=model, **on0) == 3 * GIB
    assert value(m, "swapd_model_gpu_reserved_bytes", model="a", **on0) == 3 * GIB
    assert value(m, "swapd_model_gpu_reserved_bytes", model="b", **on0) is None  # stopped
    assert value(m, "swapd_model_gpu_memory_used_bytes", model="c", **on0) == 3 * GIB
    assert value(m, "swapd_model_gpu_memory_used_bytes", model="b", **on0) is None
    assert value(m, "swapd_placements_total", model="a", reason="fits") == 1
    assert value(m, "swapd_placements_total", model="b", reason="fits") == 1
    assert value(m, "swapd_placements_total", model="c", reason="evicting") == 1
    assert value(m, "swapd_placements_total", model="c", reason="fits") is None
    assert value(m, "swapd_placements_total", model="huge", reason="no_room") == 1
    assert value(m, "swapd_placement_evictions_total", model="b", reason="room") == 1
    assert value(m, "swapd_placement_evictions_total", model="a", reason="room") is None

    # `a` grows past its reservation: the correction is counted once, the gauges follow.
    port = states(stack)["a"]["port"]
    grow = urllib.request.Request(
        f"http://127.0.0.1:{port}/gpu-mem?bytes={4 * GIB}", data=b"", method="POST"
    )
    urllib.request.urlopen(grow, timeout=5).close()
    learned(stack, "a", 4)
    m = wait_for(
        lambda: (
            (s := scrape(stack))
            and value(s, "swapd_model_gpu_reserved_bytes", model="a", **on0) == 4 * GIB
            and s
        ),
        timeout=10,
        what="a's reservation corrected on /metrics",
    )
    assert value(m, "swapd_footprint_corrections_total", model="a") == 1
    assert value(m, "swapd_model_gpu_footprint_bytes", model="a", **on0) == 4 * GIB
    assert value(m, "swapd_gpu_memory_reserved_bytes", **gpu) == 7 * GIB
    assert value(m, "swapd_gpu_memory_used_bytes", **gpu) == 7 * GIB


def test_auto_kept_to_some_gpus_is_placed_only_there(stack_factory) -> None:
    # Two fake GPUs; `left` may use GPU 1 only.
    env = gpu_env(8)
    env["SWAPD_FAKE_GPUS"] = json.dumps(
        [{"name": f"Fake {i}", "total_bytes": 8 * GIB} for i in range(2)]
    )
    models = config({"left": {"mem_gib": 1, "vram": "1GiB"}, "any": {"mem_gib": 1, "vram": "1GiB"}})
    models["models"]["left"]["gpus"] = {"auto": [1]}
    stack = stack_factory(models, env=env)
    chat(stack.url, "any")
    chat(stack.url, "left")
    now = states(stack)
    assert now["left"]["state"] == now["any"]["state"] == "ready"
    assert now["any"]["gpus"] == [fake_uuid(0)]  # the lowest index among equal fits
    # The tightest fit for `left` would be beside `any` on GPU 0; it may use GPU 1 only.
    assert now["left"]["gpus"] == [fake_uuid(1)]
