"""The queue through the real stack (fake_model.py processes stand for llama-server): while a
request to a runs, a request for b queues, and a later request for a is answered by the same a
process before b's (llama-swap's collation: A A B, not A B A); b then starts."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

import pytest

from tests.support.daemon import chat
from tests.support.proxy import received
from tests.support.stack import fake_model_cmd, free_port_range, wait_for

pytestmark = pytest.mark.processes


def _chat_later(url: str, model: str, delay: float, answers: list[tuple[str, Any]]) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "x_delay": delay}
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answers.append((model, json.loads(response.read())["served_by"]["pid"]))


def test_a_busy_model_answers_its_next_request_before_a_queued_swap(stack_factory) -> None:
    spec = {"proxy": "http://127.0.0.1:${PORT}", "unloadTimeout": 3}
    config = {
        "healthCheckTimeout": 15,
        "startPort": free_port_range(3),
        "models": {m: {"cmd": fake_model_cmd(m), **spec} for m in ("a", "b")},
    }
    stack = stack_factory(config)
    pid_a = chat(stack.url, "a")["served_by"]["pid"]
    answers: list[tuple[str, Any]] = []
    threads = []

    def send(model: str, delay: float) -> None:
        thread = threading.Thread(target=_chat_later, args=(stack.url, model, delay, answers))
        thread.start()
        threads.append(thread)

    send("a", 3.0)  # a long request: a is busy
    wait_for(lambda: stack.model("a")["in_flight"] >= 1, 10, what="a's request in flight")
    ensures = received(stack).get("Ensure", 0)
    send("b", 0.0)
    wait_for(lambda: received(stack).get("Ensure", 0) > ensures, 10, what="b's ensure")
    send("a", 0.0)
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert [m for m, _ in answers] == ["a", "a", "b"], answers
    assert [pid for m, pid in answers if m == "a"] == [pid_a, pid_a]
    assert stack.model("a")["state"] == "stopped"
    assert stack.model("b")["state"] == "ready"
