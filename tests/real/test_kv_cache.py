"""`kvCache` on llama.cpp's real server code (tests/support/upstreams/llama_server.py, the
`xllamacpp` wheel's `llama-server`, with `--slot-save-path ${KV_DIR}` and `--swa-full`) and Gemma 3
270M: a long conversation, a swap to another model and back, and the next turn is served from the
restored cache (the server's own `timings.cache_n` covers the conversation); a corrupt file falls
back to a full prefill and answers 200; a changed `n_ctx` is not restored. The stand-in's tier
(hung saves, 500s, a full disk, the budget) is tests/stack/test_kv_cache.py."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.realparts.provision import LlamaCpp
from tests.support.stack import (
    PYTHON,
    UPSTREAMS,
    Stack,
    fake_model_cmd,
    free_port_range,
    http_get,
    wait_for,
)

pytestmark = [pytest.mark.processes, pytest.mark.llamacpp]

LLAMA_SERVER = UPSTREAMS / "llama_server.py"
# About 400 tokens of Gemma's: long enough that a full prefill and a cache hit are told apart.
OPENING = "Here are my notes. " + " ".join(
    f"Note {i}: the {c} box holds {i * 3} marbles." for i, c in enumerate(["red", "blue"] * 20)
)


def config(llm: LlamaCpp, kv_dir: Path, ctx: int) -> str:
    chat = (
        f"{PYTHON} {LLAMA_SERVER} --model {llm.gguf} --port ${{PORT}} --threads 1 --ctx {ctx} "
        "--slots 1 --alias chat --swa-full --slot-save-path ${KV_DIR}"
    )
    return json.dumps(
        {
            "healthCheckTimeout": 120,
            "startPort": free_port_range(2),
            "kvCacheDir": str(kv_dir),
            "models": {
                "chat": {
                    "cmd": chat,
                    "env": [f"PYTHONPATH={llm.pythonpath}"],
                    "kvCache": "llama.cpp",
                },
                "other": {"cmd": fake_model_cmd("other")},
            },
        }
    )


@pytest.fixture
def stack(llamacpp: LlamaCpp, tmp_path: Path) -> Iterator[Stack]:
    stack = Stack(config(llamacpp, tmp_path / "kv", 2048))
    stack.kv_dir = tmp_path / "kv"  # type: ignore[attr-defined]
    with stack:
        yield stack


def turn(stack: Stack, messages: list[dict[str, str]], text: str) -> dict[str, Any]:
    messages.append({"role": "user", "content": text})
    body = {"model": "chat", "messages": messages, "max_tokens": 4, "ignore_eos": True}
    request = urllib.request.Request(
        stack.url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        assert response.status == 200
        answer: dict[str, Any] = json.loads(response.read())
    messages.append({"role": "assistant", "content": answer["choices"][0]["message"]["content"]})
    return answer


def away(stack: Stack) -> None:
    status, _ = http_get(stack.url + "/upstream/other/health", timeout=60)
    assert status == 200
    stack.wait_state("chat", "stopped", timeout=60)


@pytest.mark.timeout(900)  # four starts and two full prefills on one CPU thread
def test_the_conversation_survives_a_swap_and_a_changed_n_ctx_is_not_restored(
    stack: Stack, llamacpp: LlamaCpp
) -> None:
    messages: list[dict[str, str]] = []
    first = turn(stack, messages, OPENING)
    held = first["usage"]["prompt_tokens"]
    assert held > 300 and first["timings"]["cache_n"] == 0
    away(stack)
    kv = stack.model("chat")["kv"]
    assert kv["slots"] == [0] and kv["tokens"] >= held and kv["bytes"] > 0
    # Back: restored before the request went through; the next turn prefills only itself.
    answer = turn(stack, messages, "How many marbles are in the red boxes?")
    assert answer["timings"]["cache_n"] >= held
    assert answer["timings"]["prompt_n"] < 40
    kv = wait_for(lambda: (m := stack.model("chat"))["kv"]["first_cache_n"] >= 0 and m)["kv"]
    assert kv["restores"] == 1 and kv["restored_tokens"] >= held and not kv["short"]
    swaps = stack.get_ok("/api/swaps")["swaps"]
    start = [s for s in swaps if s["model"] == "chat"][-1]
    assert start["phase_bytes"]["kv_restore"] > 0 and "kv_restore" in start["phases"]
    # A corrupt file: the server refuses it (400), and the turn is a full prefill and a 200.
    away(stack)
    (file,) = (stack.kv_dir / "chat").glob("*.bin")  # type: ignore[attr-defined]
    file.write_bytes(file.read_bytes()[:1000])
    answer = turn(stack, messages, "And in the blue ones?")
    assert answer["timings"]["cache_n"] == 0
    assert "answered 400" in stack.model("chat")["kv"]["last_failure"]
    # A larger n_ctx: a new definition; the old files are removed at the reload, not restored.
    away(stack)
    assert stack.model("chat")["kv"]["slots"] == [0]
    stack.write_config(config(llamacpp, stack.kv_dir, 4096))  # type: ignore[attr-defined]
    stack.swapd("reload")
    assert stack.model("chat")["kv"]["slots"] == []
    answer = turn(stack, messages, "Thanks.")
    assert answer["timings"]["cache_n"] == 0
    assert stack.model("chat")["kv"]["restores"] == 1
