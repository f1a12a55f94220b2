"""`selectors`: the config's checks (llama-swap's messages), and through the real stack
(fake_model.py stands for llama-server) a spillover selector sending a second concurrent request
to a second model, a third to a 503, `warm` and `pin`, and the selector's `/v1/models` row."""

from __future__ import annotations

import json
import textwrap
import threading
import urllib.error
import urllib.request
from typing import Any

import pytest

from swapd.daemon.config import ConfigError, load_config_text
from tests.stack import fake_model_cmd, free_port_range, http_get, wait_for
from tests.test_daemon_swap import chat

MODELS = """
models:
  a: {cmd: "x", proxy: "http://127.0.0.1:9"}
  b: {cmd: "x", proxy: "http://127.0.0.1:9", aliases: [bb]}
peers:
  far: {proxy: "http://127.0.0.1:9", models: [m]}
"""


@pytest.mark.parametrize(
    ("selectors", "message"),
    [
        ("  a: {strategy: pin, targets: [b]}\n", 'selectors.a: name conflicts with model ID "a"'),
        ("  s: {targets: [a]}\n", "selectors.s.strategy is required"),
        ("  s: {strategy: best, targets: [a]}\n",
         'selectors.s.strategy: unknown strategy "best" (valid: warm, pin, spillover)'),
        ("  s: {strategy: pin}\n", "selectors.s.targets must contain at least one entry"),
        ("  s: {strategy: pin, targets: [t]}\n  t: {strategy: pin, targets: [a]}\n",
         'selectors.s.targets[0] references selector "t"; selector chaining is not supported'),
        ("  s: {strategy: pin, targets: [zz]}\n",
         'selectors.s.targets[0] references unknown model "zz"'),
        ("  s: {strategy: warm, targets: [m]}\n",
         'selectors.s.targets[0] must resolve to a local model for strategy "warm"'),
        ("  s: {strategy: spillover, targets: [b, bb]}\n",
         'selectors.s.targets contains duplicate resolved model "b"'),
        ("  s: {strategy: spillover, targets: [a, b]}\n",
         'selectors.s target "a" is not in a routing group'),
        ("  s: {strategy: spillover, targets: [a], settings: {spillover: 0}}\n",
         "selectors.s.settings.spillover must be >= 1"),
    ],
)  # fmt: skip
def test_selector_errors(selectors: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text(MODELS + "selectors:\n" + selectors)
    assert message in str(caught.value)


def test_spillover_targets_must_be_able_to_run_together() -> None:
    spill = "selectors:\n  s: {strategy: spillover, targets: [a, b, far/m]}\n"
    together = load_config_text(MODELS + "groups: {g: {swap: false, members: [a, b]}}\n" + spill)
    assert together.selectors["s"].targets == ("a", "b", "far/m")
    with pytest.raises(ConfigError) as caught:
        load_config_text(MODELS + "groups: {g: {members: [a, b]}}\n" + spill)
    assert "spillover targets must share a group with swap: false" in str(caught.value)
    matrix = "matrix: {sets: {one: a | b}}\n"
    with pytest.raises(ConfigError) as caught:
        load_config_text(MODELS + matrix + spill)
    assert "must all appear together in one expanded matrix set" in str(caught.value)
    assert load_config_text(MODELS + "matrix: {sets: {one: a & b}}\n" + spill).selectors


def _chat_slow(url: str, model: str, delay: float, answers: list[Any]) -> None:
    body = {"model": model, "messages": [], "x_delay": delay}
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            answers.append(json.loads(response.read())["served_by"]["name"])
    except urllib.error.HTTPError as exc:
        answers.append((exc.code, json.loads(exc.read())["error"]["message"]))


@pytest.mark.processes
def test_a_spillover_selector_spills_over(stack_factory) -> None:
    a, b = fake_model_cmd("a"), fake_model_cmd("b")
    config = textwrap.dedent(
        f"""
        startPort: {free_port_range(3)}
        groups: {{all: {{swap: false, members: [a, b]}}}}
        models:
          a: {{cmd: "{a}", proxy: "http://127.0.0.1:${{PORT}}"}}
          b: {{cmd: "{b}", proxy: "http://127.0.0.1:${{PORT}}"}}
        selectors:
          chat: {{strategy: spillover, targets: [a, b], description: spills}}
          warmest: {{strategy: warm, targets: [b, a]}}
          first: {{strategy: pin, targets: [b]}}
        """
    )
    stack = stack_factory(config)
    answers: list[Any] = []
    threads = [threading.Thread(target=_chat_slow, args=(stack.url, "chat", 4.0, answers))]
    threads[0].start()
    wait_for(lambda: stack.model("a")["in_flight"] >= 1, 20, what="a busy with the first")
    threads.append(threading.Thread(target=_chat_slow, args=(stack.url, "chat", 4.0, answers)))
    threads[1].start()
    wait_for(lambda: stack.model("b")["in_flight"] >= 1, 20, what="b busy with the second")
    _chat_slow(stack.url, "chat", 0.0, answers)  # both full: nothing left to spill to
    for thread in threads:
        thread.join(30)
    assert answers == [(503, 'selector "chat" has no available spillover targets'), "a", "b"]

    assert chat(stack.url, "warmest")["served_by"]["name"] == "b"  # both ready: the first
    assert chat(stack.url, "first")["served_by"]["name"] == "b"
    listed = {m["id"]: m for m in json.loads(http_get(stack.url + "/v1/models")[1])["data"]}
    assert listed["chat"]["meta"]["llamaswap"] == {
        "type": "selector",
        "strategy": "spillover",
        "targets": ["a", "b"],
        "spillover": 1,
    }
    assert listed["chat"]["description"] == "spills"
    assert listed["chat"]["status"] == {"value": "loaded"}
