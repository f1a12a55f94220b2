"""Lifecycle events that interrupt a start or a wait, through the real stack: an unload or a
reload while a model starts, a shutdown while a docker-like model starts, and a daemon killed
while a request waits for a swap."""

from __future__ import annotations

import signal
import threading
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.support.daemon import _alive, chat, config
from tests.support.proxy import received
from tests.support.stack import (
    Stack,
    fake_model_cmd,
    wait_for,
)

pytestmark = pytest.mark.processes

# The start never finishes by itself within a test: it is interrupted first.
SLOW = ("--health-delay", "60")


def _request_in_background(url: str, model: str) -> tuple[threading.Thread, list[Any]]:
    """A chat request in a thread; its outcome (the reply, or the HTTPError) lands in the list."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(chat(url, model))
        except urllib.error.HTTPError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _starting_pid(stack: Stack, model: str) -> int:
    stack.wait_state(model, "starting")
    return wait_for(lambda: stack.watcher_pids(f"model-{model}"), what="the model's pid")[0]


def test_unload_while_starting_aborts_the_start_and_answers_the_waiting_request(
    stack_factory,
) -> None:
    stack = stack_factory(config({"slow": {"cmd": fake_model_cmd("slow", *SLOW)}}))
    thread, outcome = _request_in_background(stack.url, "slow")
    pid = _starting_pid(stack, "slow")

    assert "unloaded slow" in stack.swapd("unload", "slow", timeout=20).stdout
    # Aborted, not waited for: the model never became ready on its way to stopped.
    assert stack.model("slow")["reason"] == "start aborted: unloaded"
    thread.join(10)
    assert outcome, "the waiting request got no answer"
    error = outcome[0]
    assert isinstance(error, urllib.error.HTTPError) and error.code == 503
    assert "unloaded while this request waited" in error.read().decode()
    assert not _alive(pid)
    entry = stack.model("slow")
    assert entry["state"] == "stopped" and "unloaded" in entry["reason"]
    assert "model-slow" not in stack.circusctl("list")


def test_reload_while_starting_serves_the_waiting_request_with_the_new_definition(
    stack_factory,
) -> None:
    cfg = config({"model": {"cmd": fake_model_cmd("old", *SLOW)}})
    stack = stack_factory(cfg)
    thread, outcome = _request_in_background(stack.url, "model")
    old_pid = _starting_pid(stack, "model")

    cfg["models"]["model"]["cmd"] = fake_model_cmd("new")
    stack.write_config(cfg)
    assert "restarted starts with the new definition: model" in stack.swapd("reload").stdout
    thread.join(20)
    assert outcome and isinstance(outcome[0], dict), outcome
    assert outcome[0]["served_by"]["name"] == "new"
    assert not _alive(old_pid)
    assert stack.model("model")["pid"] == outcome[0]["served_by"]["pid"]
    assert stack.model_log("model").count("--- swapd") == 2


def test_a_daemon_restarted_alone_leaves_a_starting_model_to_the_next_one(stack_factory) -> None:
    stack = stack_factory(config({"slow": {"cmd": fake_model_cmd("slow", "--health-delay", "2")}}))
    thread, outcome = _request_in_background(stack.url, "slow")
    pid = _starting_pid(stack, "slow")
    # SIGTERM to the daemon alone (as `circusctl restart swapd-daemon` does): circusd goes on.
    stack.kill_watcher("swapd-daemon", signal.SIGTERM, timeout=15)
    assert stack.wait_state("slow", "ready", timeout=15)["pid"] == pid
    thread.join(15)
    assert outcome and isinstance(outcome[0], dict), outcome
    assert outcome[0]["served_by"]["pid"] == pid
    assert stack.model_log("slow").count("--- swapd") == 1, "the model was started again"


def test_a_request_waiting_for_a_swap_is_answered_after_the_daemon_is_killed(
    stack_factory,
) -> None:
    stack = stack_factory(
        config(
            {"first": {"cmd": fake_model_cmd("first")}, "second": {"cmd": fake_model_cmd("second")}}
        )
    )
    first_pid = chat(stack.url, "first")["served_by"]["pid"]
    # A stream to `first` holds its drain, so the Ensure for `second` waits in the daemon.
    chunks: list[bytes] = []

    def stream() -> None:
        url = stack.url + "/upstream/first/slow?n=20&delay=0.2"
        with urllib.request.urlopen(url, timeout=30) as response:
            chunks.extend(response.read().splitlines())

    streamer = threading.Thread(target=stream, daemon=True)
    streamer.start()
    wait_for(lambda: stack.model("first")["in_flight"] == 1, what="the stream to be in flight")
    ensures = received(stack).get("Ensure", 0)
    thread, outcome = _request_in_background(stack.url, "second")
    # The Ensure waits in the daemon: `first` is busy, so the swap does not drain it yet
    # (collation, docs/swapping.md), and once it does, the drain waits for the stream.
    wait_for(lambda: received(stack).get("Ensure", 0) > ensures, what="the Ensure for second")
    assert stack.model("first")["state"] in ("ready", "draining")
    stack.kill_watcher("swapd-daemon", signal.SIGKILL, timeout=10)
    thread.join(30)
    streamer.join(30)
    # The proxy sent the Ensure again to the new daemon, which adopted `first`, drained it (the
    # stream was not cut), stopped it and started `second`.
    assert outcome and isinstance(outcome[0], dict), outcome
    assert outcome[0]["served_by"]["name"] == "second"
    assert chunks == [str(i).encode() for i in range(20)]
    assert not _alive(first_pid)
    assert stack.model("second")["state"] == "ready"
