"""Hot reload through the real stack (fake_model.py processes stand for llama-server):
`swapd run --watch-config` applies an edited file as `swapd reload` does (an unchanged model keeps
its process), refuses a broken edit with the whole report in its log while the old config keeps
serving, and SIGHUP to `swapd run` (circusd) is a reload, not a restart of every process."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from swapd.daemon.cli.circus_config import PROXY_WATCHER
from tests.support.daemon import chat
from tests.support.stack import fake_model_cmd, free_port_range, wait_for

pytestmark = pytest.mark.processes

# The watch polls every 0.5 s and promises 2 s; the rest is for `swapd status` round trips on a
# loaded machine.
NOTICED_WITHIN = 3.0


def _config(start: int, models: dict[str, list[str]]) -> dict[str, Any]:
    spec = {"proxy": "http://127.0.0.1:${PORT}", "unloadTimeout": 3}
    return {
        "healthCheckTimeout": 15,
        "startPort": start,
        "routing": {
            "router": {"settings": {"groups": {"all": {"swap": False, "members": sorted(models)}}}}
        },
        "models": {m: {"cmd": fake_model_cmd(m, *extra), **spec} for m, extra in models.items()},
    }


def _known(stack, model_id: str) -> bool:  # type: ignore[no-untyped-def]
    return any(m["model"] == model_id for m in stack.status()["models"])


def test_watch_config_applies_an_edit_and_refuses_a_broken_one(stack_factory) -> None:
    start = free_port_range(6)
    stack = stack_factory(_config(start, {"a": [], "b": []}), run_args=("--watch-config",))
    pid_a = chat(stack.url, "a")["served_by"]["pid"]
    chat(stack.url, "b")

    # b changes, c is new, a is as it was.
    stack.write_config(_config(start, {"a": [], "b": ["--health-delay", "0"], "c": []}))
    wait_for(lambda: _known(stack, "c"), NOTICED_WITHIN, 0.1, "the edit to be applied")
    assert stack.wait_state("b", "stopped")["reason"] == "config changed"
    assert (stack.model("a")["state"], stack.model("a")["pid"]) == ("ready", pid_a)
    assert chat(stack.url, "c")["served_by"]["name"] == "c"

    # A broken edit: refused, the whole report in the log, the old config still serving.
    broken = _config(start, {"a": [], "d": []})
    broken["models"]["d"]["chekEndpoint"] = "/health"
    broken["models"]["a"]["ttl"] = -5
    stack.write_config(broken)
    wait_for(
        lambda: "reload (file changed) rejected" in stack.output(),
        NOTICED_WITHIN,
        0.1,
        "the broken edit to be refused",
    )
    output = stack.output()
    assert "unknown key 'chekEndpoint'; did you mean 'checkEndpoint'?" in output
    assert "models.a.ttl" in output  # every problem, not only the first
    assert not _known(stack, "d")
    assert chat(stack.url, "a")["served_by"]["pid"] == pid_a
    assert chat(stack.url, "c")["served_by"]["name"] == "c"


def test_sighup_reloads_without_restarting_processes(stack_factory) -> None:
    start = free_port_range(4)
    stack = stack_factory(_config(start, {"a": []}))
    pid_a = chat(stack.url, "a")["served_by"]["pid"]
    proxies = stack.watcher_pids(PROXY_WATCHER)
    stack.write_config(_config(start, {"a": [], "b": []}))
    assert stack.proc is not None
    stack.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: _known(stack, "b"), 10, 0.1, "the reload SIGHUP asked for")
    assert (stack.model("a")["state"], stack.model("a")["pid"]) == ("ready", pid_a)
    assert stack.watcher_pids(PROXY_WATCHER) == proxies
    assert chat(stack.url, "b")["served_by"]["name"] == "b"
    assert chat(stack.url, "a")["served_by"]["pid"] == pid_a
