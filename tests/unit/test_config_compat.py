"""Configs written for llama-swap load unchanged (issue 2, "Compatibility")."""

from __future__ import annotations

import pytest

from swapd.daemon.config import model as c
from swapd.daemon.config.loader import load, load_config
from swapd.ipc.path_patterns import search_form
from tests.support.paths import CONFIGS, SHARED

# The seed page sits beside the checkout (../shared/seed/), as DESIGN.md refers to it.
SEED = SHARED / "seed" / "comfyui-endpoint.txt"


def test_seed_fixtures_are_verbatim_copies_of_the_seed_page() -> None:
    if not SEED.exists():
        pytest.skip(f"seed page not beside this checkout ({SEED})")
    page = SEED.read_text()
    for name in ("seed_comfyui_auto.yaml", "seed_other_comfyui.yaml"):
        assert (CONFIGS / name).read_text().rstrip("\n") in page


def test_seed_comfyui_auto_block_loads_with_forced_settings() -> None:
    loaded = load(CONFIGS / "seed_comfyui_auto.yaml", environ={})
    assert loaded.warnings == ()
    model = loaded.config.models["comfyui_auto"]
    assert model.check_endpoint == "/"
    assert model.cmd_stop == ("docker", "stop", "comfyui-auto")
    assert model.cmd[:10] == (
        "docker",
        "run",
        "--rm",
        "--name",
        "comfyui-auto",
        "--runtime=nvidia",
        "--gpus",
        '"device=2,3"',
        "-p",
        "5800:8188",
    )
    assert model.cmd[-3:] == ("-e", "CLI_ARGS=", "yanwk/comfyui-boot:cu130-slim-v2")
    assert model.cmd.count("-v") == 11
    assert model.unload_timeout == 30
    assert model.ttl == 600
    assert model.unlisted is True
    assert model.port == 5800
    assert model.proxy == "http://localhost:5800"
    assert model.ignore_websockets is True
    assert model.concurrency_limit == 999
    assert {f.key for f in model.forced} == {"compat.ignoreWebsockets", "concurrencyLimit"}
    assert loaded.config.ignore_paths == c.DEFAULT_IGNORE_PATHS


def test_seed_by_hand_block_loads_with_its_own_settings_and_ignore_paths() -> None:
    config = load_config(CONFIGS / "seed_other_comfyui.yaml", environ={})
    model = config.models["my-other-comfyui-model"]
    assert model.cmd_stop == ("docker", "stop", "my-other-comfyui-model")
    assert model.cmd[3:5] == ("--name", "my-other-comfyui-model")
    assert model.concurrency_limit == 999
    assert model.ignore_websockets is True
    assert model.forced == ()  # set by hand, not forced: only comfyui_auto is reserved
    assert config.ignore_paths == (
        r".*\.(js|json|css|png|gif|jpg|jpeg|ico|txt)$",
        r"^\/ws(\/|$)",
        r"^\/api\/jobs$",
    )
    # The seed writes llama-swap's default; the proxy searches with it without the leading `.*`.
    assert search_form(config.ignore_paths[0]) == c.DEFAULT_IGNORE_PATHS[0]


def test_llama_swap_readme_minimal_config_loads() -> None:
    config = load_config(CONFIGS / "llama_swap_readme_minimal.yaml", environ={})
    assert set(config.models) == {"qwen2.5", "smollm2"}
    qwen = config.models["qwen2.5"]
    assert qwen.cmd == (
        "/app/llama-server",
        "-hf",
        "bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M",
        "--port",
        "9999",
    )
    assert qwen.proxy == "http://127.0.0.1:9999"
    assert qwen.port is None
    assert qwen.check_endpoint == "/health"


def test_llama_swap_config_with_groups_macros_aliases_filters_and_peers_loads() -> None:
    environ = {
        "HOME": "/home/llama",
        "SWAPD_TEST_API_KEY": "sk-from-env",
        "SWAPD_TEST_OPENROUTER_KEY": "or-key",
    }
    loaded = load(CONFIGS / "llama_swap_features.yaml", environ=environ)
    config = loaded.config
    assert config.health_check_timeout == 500
    assert config.start_port == 10001
    assert config.global_ttl == 300
    assert config.api_keys == ("sk-hunter2", "sk-from-env")
    assert config.include_aliases_in_list is True

    gpt = config.models["gpt-oss-120b"]
    # Ports in sorted id order: docker-llama 10001, gpt-oss-120b 10002, qwen-unlisted 10003.
    assert gpt.port == 10002
    assert gpt.cmd == (
        "/opt/llama.cpp/llama-server",
        "--port",
        "10002",
        "--model",
        "/home/llama/models/gpt-oss-120B.gguf",
        "--ctx-size",
        "16384",
        "--temperature",
        "0.7",
    )
    assert gpt.metadata["port"] == 10002
    assert gpt.metadata["temperature"] == 0.7
    assert gpt.metadata["note"] == (
        "The gpt-oss-120b is running on port 10002 temp=0.7, context=16384"
    )
    assert gpt.filters.strip_params == ("temperature", "top_k", "top_p")
    assert gpt.filters.set_params == {"temperature": 0.7, "top_p": 0.9}
    # setParamsByID's names are aliases after the written ones (macros in the key expanded).
    assert gpt.aliases == ("gpt-4o-mini", "gpt-3.5-turbo", "gpt-oss-120b:high")
    assert gpt.filters.set_params_by_id == {
        "gpt-oss-120b:high": {"chat_template_kwargs": {"reasoning_effort": "high"}}
    }
    assert gpt.env == {"CUDA_VISIBLE_DEVICES": "0,1,2"}
    assert gpt.ttl == 60 and gpt.concurrency_limit == 10
    # sendLoadingState: true at the top, false on gpt-oss-120b: the model's own value wins.
    assert gpt.send_loading_state is False
    assert config.models["qwen-unlisted"].send_loading_state is True

    assert config.models["qwen-unlisted"].ttl == 300  # -1 = globalTTL
    docker = config.models["docker-llama"]
    assert docker.port == 10001 and docker.proxy == "http://127.0.0.1:10001"
    assert docker.cmd_stop == ("docker", "stop", "docker-llama")
    assert docker.ttl == 0
    embedder = config.models["embedder"]
    assert embedder.check_endpoint is None and embedder.port is None

    assert config.groups["llms"].members == ("gpt-oss-120b", "qwen-unlisted")
    assert config.groups["forever"] == c.GroupConfig(
        members=("embedder",), swap=False, exclusive=False, persistent=True
    )
    assert config.preload == ("embedder",)
    assert config.peers["llama-swap-peer"].models == ("model_a", "model_b", "embeddings/model_c")
    openrouter = config.peers["openrouter"]
    assert openrouter.api_key == "or-key"
    assert openrouter.filters.set_params == {"provider": {"data_collection": "deny", "zdr": True}}
    assert config.resolve("gpt-4o-mini") is gpt

    assert config.log_to_stdout == "proxy"
    assert gpt.timeouts.connect == 30 and gpt.timeouts.response_header == 60
    assert openrouter.timeouts.response_header == 60
    assert loaded.warnings == ()
