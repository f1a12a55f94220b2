"""llama-swap's smaller routes through the real stack (fake_model.py stands for llama-server):
`/wol-health` answers without an API key, the versionless `/v/...` and audio.cpp
`/audioapi/...` routes reach the model without their prefix, and `capabilities` are rendered in
`/v1/models` as llama-swap renders them."""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.support.hostile import RequestLog
from tests.support.stack import fake_model_cmd, free_port_range, http_get

pytestmark = pytest.mark.processes


def test_wol_health_and_prefixed_routes(stack_factory, tmp_path) -> None:
    log = RequestLog(tmp_path / "requests.jsonl")
    config = {
        "startPort": free_port_range(2),
        "apiKeys": ["sk-test"],
        "models": {
            "m": {
                "cmd": fake_model_cmd("m", "--request-log", str(log.path)),
                "proxy": "http://127.0.0.1:${PORT}",
                "metadata": {"capabilities": "dropped", "kept": 1},
                "capabilities": {
                    "in": ["text", "image"],
                    "out": ["text"],
                    "tools": True,
                    "context": 8192,
                },
            }
        },
    }
    stack = stack_factory(config)
    assert http_get(stack.url + "/wol-health") == (200, b"OK")
    for path in ("/v/chat/completions", "/audioapi/v1/tasks/run", "/v/embeddings"):
        request = urllib.request.Request(
            stack.url + path,
            data=json.dumps({"model": "m"}).encode(),
            headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
    paths = [e["raw_path"] for e in log.entries() if e["method"] == "POST"]
    assert paths == ["/chat/completions", "/v1/tasks/run", "/embeddings"]

    request = urllib.request.Request(
        stack.url + "/v1/models", headers={"Authorization": "Bearer sk-test"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        [entry] = json.load(response)["data"]
    assert entry["architecture"] == {
        "input_modalities": ["text", "image"],
        "output_modalities": ["text"],
        "modality": "text+image->text",
    }
    assert entry["capabilities"] == {"vision": True, "function_calling": True}
    assert entry["supported_parameters"] == ["tools", "tool_choice"]
    assert entry["context_length"] == 8192
    assert entry["meta"]["n_ctx"] == 8192
    assert entry["meta"]["llamaswap"] == {"kept": 1, "type": "model"}
