"""The Playground with llama.cpp's real server (tests/support/upstreams/llama_server.py, the real
tier's Gemma 3 270M, as in tests/real/test_llamacpp.py) in Debian's real chromium: a chat started
on a stopped model shows swapd's loading progress, streams the model's answer and shows its
speed, the same figure the activity log keeps; a text completion streams too. Gemma 270M is a base
model: the tests look at counts and speeds, never at the text.

Both markers: `llamacpp` and `browser`. tests/support/parallel.py puts a test in the group of its
first marker in TIER_GROUPS (docker, llamacpp, browser), so these run in the `llamacpp` group, one
at a time on one worker with the other llama.cpp tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.realparts.provision import LlamaCpp
from tests.support.stack import PYTHON, UPSTREAMS, Stack, free_port_range, wait_for
from tests.support.ui import call, module_shots, shoot, ui_page

pytestmark = [pytest.mark.processes, pytest.mark.llamacpp, pytest.mark.browser]

LLAMA_SERVER = UPSTREAMS / "llama_server.py"
MODEL = "gemma-a"
ANSWER = '#playground-view [data-role="answer"]'
TOKENS = 16
# Generation on two shared cores, after a cold start of the model.
SLOW_MS = 180_000


@pytest.fixture(scope="module")
def stack(llamacpp: LlamaCpp, chromium: Path) -> Iterator[Stack]:
    port = free_port_range(2)
    config = f"""
healthCheckTimeout: 120
startPort: {port}
models:
  {MODEL}:
    cmd: >
      {PYTHON} {LLAMA_SERVER} --model {llamacpp.gguf} --port ${{PORT}}
      --threads 1 --ctx 2048 --slots 1 --alias {MODEL}
    env: ["PYTHONPATH={llamacpp.pythonpath}"]
    sendLoadingState: true
    capabilities: {{in: [text], out: [text], context: 2048}}
"""
    stack = Stack("")
    stack.write_config(config)
    with stack:
        yield stack


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Path:
    return module_shots(request)


def _options(page: Any, kind: str, max_tokens: int) -> None:
    view = f'#playground-view [data-kind-view="{kind}"]'
    page.click(f"{view} details.settings > summary")
    page.fill(f'{view} [data-option="max_tokens"]', str(max_tokens))
    # Exact counts: llama.cpp's own parameter, sent as an extra one.
    page.fill(f'{view} [data-option="extra"]', '{"ignore_eos": true}')


def _newest(stack: Stack, path: str) -> dict[str, Any]:
    data = json.loads(call(stack.url + "/api/metrics/activity?limit=5")[2])["data"]
    record: dict[str, Any] = next(r for r in data if r["req_path"] == path)
    return record


def test_a_chat_streams_an_answer_and_shows_its_speed(
    chromium: Path, stack: Stack, shots: Path
) -> None:
    assert stack.model(MODEL)["state"] == "stopped"
    with ui_page(chromium, stack.url + f"/ui/#playground/{MODEL}") as page:
        page.wait_for_selector("#conn.live")
        wait_for(lambda: page.input_value("#pg-model") == MODEL, 15, what="the model picked")
        _options(page, "chat", TOKENS)
        prompt = '#playground-view [data-kind-view="chat"] [data-role="prompt"]'
        page.fill(prompt, "Name a colour.")
        page.press(prompt, "Enter")
        # The model starts: swapd's loading progress comes first, then llama.cpp's stream.
        page.wait_for_selector(f'{ANSWER} details[data-role="loading"]', timeout=SLOW_MS)
        page.wait_for_selector(f'{ANSWER}[data-state="streaming"]', timeout=SLOW_MS)
        page.wait_for_selector(f'{ANSWER}[data-state="done"]', timeout=SLOW_MS)
        loading = page.text_content(f'{ANSWER} details[data-role="loading"]') or ""
        assert f"swapd loading model: {MODEL}" in loading and "Done!" in loading
        assert page.text_content(f'{ANSWER} [data-role="text"]')
        # The speed llama.cpp reported, as the activity log keeps it.
        record = wait_for(
            lambda: _newest(stack, "/v1/chat/completions"), 15, what="the chat's record"
        )
        assert record["tokens"]["output_tokens"] == TOKENS
        tps = page.wait_for_selector(f'{ANSWER} [data-role="tps"]')
        assert tps.get_attribute("data-from") == "server"
        assert float(tps.get_attribute("data-tps") or 0) == record["tokens"]["tokens_per_second"]
        speed = record["tokens"]["tokens_per_second"]
        assert (tps.text_content() or "") == f"{TOKENS} tokens at {speed:.1f} tok/s"
        assert speed > 0
        assert page.get_attribute(f'{ANSWER} [data-role="finish"]', "data-finish") == "length"
        prompt_tokens = page.text_content(f'{ANSWER} [data-role="prompt-tokens"]') or ""
        assert prompt_tokens.startswith(f"prompt {record['tokens']['input_tokens']} tokens at")
        shoot(page, shots, "desktop-playground-llamacpp-chat")
        assert page.errors == []


def test_a_text_completion_streams(chromium: Path, stack: Stack) -> None:
    with ui_page(chromium, stack.url + f"/ui/#playground/{MODEL}") as page:
        page.wait_for_selector("#conn.live")
        wait_for(lambda: page.input_value("#pg-model") == MODEL, 15, what="the model picked")
        page.click('#playground-view [data-kind="completion"]')
        _options(page, "completion", 8)
        prompt = '#playground-view [data-kind-view="completion"] [data-role="prompt"]'
        page.fill(prompt, "The capital of France is")
        page.press(prompt, "Control+Enter")
        page.wait_for_selector(f'{ANSWER}[data-state="done"]', timeout=SLOW_MS)
        assert page.text_content(f'{ANSWER} [data-role="text"]')
        record = wait_for(lambda: _newest(stack, "/v1/completions"), 15, what="its record")
        assert record["tokens"]["output_tokens"] == 8
        tps = page.wait_for_selector(f'{ANSWER} [data-role="tps"]')
        assert (tps.text_content() or "").startswith("8 tokens")
        assert page.errors == []
