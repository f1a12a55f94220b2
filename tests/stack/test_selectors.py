"""`selectors` through the real stack (fake_model.py stands for llama-server; the config's checks
are tests/unit/test_selectors.py): a spillover selector sending a second concurrent request
to a second model, a third to a 503, `warm` and `pin`, and the selector's `/v1/models` row."""

from __future__ import annotations

import json
import textwrap
import threading
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.support.daemon import chat
from tests.support.stack import fake_model_cmd, free_port_range, http_get, wait_for


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
