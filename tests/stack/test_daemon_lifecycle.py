"""Model lifecycle through the real stack (circusd + daemon + proxy + fake_model upstreams):
TTL, a crash noticed and recovered, start failures with the log tail, backoff, health-check
timeout, and concurrent ensures joining one start."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import urllib.error
import urllib.request

import pytest

from swapd.ipc.messages import Error, Ready
from tests.support.daemon import _alive, chat, config, ensure
from tests.support.stack import PYTHON, fake_model_cmd, wait_for

pytestmark = pytest.mark.processes


def test_ttl_unloads_an_idle_model_and_in_flight_requests_hold_it(stack_factory) -> None:
    stack = stack_factory(config({"quick": {"cmd": fake_model_cmd("quick"), "ttl": 1}}))
    # A stream lasting 3 s, three times the TTL: the model must stay loaded while it runs.
    stream_done = threading.Event()
    chunks: list[bytes] = []

    def stream() -> None:
        url = stack.url + "/upstream/quick/slow?n=15&delay=0.2"
        with urllib.request.urlopen(url, timeout=30) as response:
            chunks.extend(response.read().splitlines())
        stream_done.set()

    thread = threading.Thread(target=stream)
    thread.start()
    entry = stack.wait_state("quick", "ready")
    pid = entry["pid"]
    while not stream_done.wait(0.2):
        assert stack.model("quick")["state"] == "ready", (
            "TTL unloaded a model with a request in flight"
        )
    thread.join()
    assert chunks == [str(i).encode() for i in range(15)]

    stopped = stack.wait_state("quick", "stopped", timeout=10)
    assert stopped["reason"] == "ttl expired"
    assert not _alive(pid)


def test_a_crashed_model_is_noticed_and_started_again(stack_factory) -> None:
    stack = stack_factory(config({"fragile": {"cmd": fake_model_cmd("fragile")}}))
    first = chat(stack.url, "fragile")["served_by"]["pid"]
    os.kill(first, signal.SIGKILL)
    stopped = stack.wait_state("fragile", "stopped", timeout=5)
    # Killed by a signal: said by the signal's name and meaning, not as `exit code -9`.
    assert stopped["reason"] == (
        f"process {first} was killed by SIGKILL (killed; the kernel's out-of-memory killer sends "
        "it too)"
    )
    assert "model-fragile" not in stack.circusctl("list")
    second = chat(stack.url, "fragile")["served_by"]["pid"]
    assert second != first


def test_start_failure_reports_exit_code_and_log_tail_then_backs_off(stack_factory) -> None:
    stack = stack_factory(
        config({"broken": {"cmd": fake_model_cmd("broken", "--fail", "--exit-code", "7")}})
    )
    reply = asyncio.run(ensure(stack.run_dir, "broken"))
    assert isinstance(reply, Error), reply
    assert reply.status == 502
    assert "exit code 7" in reply.message
    assert any("cannot load its weights" in line for line in reply.log_tail), reply.log_tail
    assert len(reply.log_tail) <= 20
    assert stack.model("broken")["state"] == "failed"
    assert "cannot load its weights" in stack.model_log("broken")

    # Through the proxy: the same failure as an HTTP error, not a hang.
    with pytest.raises(urllib.error.HTTPError) as failed:
        chat(stack.url, "broken")
    assert failed.value.code == 502

    # Third failure in a row: from now on the daemon backs off instead of looping.
    third = asyncio.run(ensure(stack.run_dir, "broken"))
    assert isinstance(third, Error) and third.status == 502
    backing = asyncio.run(ensure(stack.run_dir, "broken"))
    assert isinstance(backing, Error)
    assert backing.status == 503 and backing.code == "backing_off"
    assert "failed to start 3 times" in backing.message and "next try in" in backing.message


def test_missing_binary_fails_clearly(stack_factory) -> None:
    stack = stack_factory(config({"ghost": {"cmd": "/nonexistent/llama-server --port ${PORT}"}}))
    reply = asyncio.run(ensure(stack.run_dir, "ghost"))
    assert isinstance(reply, Error) and reply.status == 502
    assert "'/nonexistent/llama-server' not found" in reply.message
    assert "model-ghost" not in stack.circusctl("list")


def test_concurrent_ensures_start_a_model_once(stack_factory) -> None:
    stack = stack_factory(
        config({"shared": {"cmd": fake_model_cmd("shared", "--health-delay", "0.5")}})
    )

    async def many() -> list[object]:
        return await asyncio.gather(*(ensure(stack.run_dir, "shared") for _ in range(20)))

    replies = asyncio.run(many())
    assert all(isinstance(r, Ready) for r in replies), replies
    assert stack.model_log("shared").count("--- swapd") == 1
    pids = {chat(stack.url, "shared")["served_by"]["pid"] for _ in range(3)}
    assert pids == {stack.model("shared")["pid"]}


def test_unload_and_reload_commands(stack_factory) -> None:
    stack = stack_factory(config({"one": {"cmd": fake_model_cmd("one")}}))
    chat(stack.url, "one")
    assert "unloaded one" in stack.swapd("unload", "one").stdout
    assert stack.model("one")["state"] == "stopped"
    bad = stack.swapd("unload", "nope", check=False)
    assert bad.returncode == 1 and "no local model 'nope'" in bad.stderr

    chat(stack.url, "one")
    pid = stack.model("one")["pid"]
    # Reload with an unchanged definition keeps the process; a changed one is restarted on demand.
    stack.swapd("reload")
    assert stack.model("one")["pid"] == pid
    cfg = config(
        {
            "one": {"cmd": fake_model_cmd("one", "--health-delay", "0")},
            "two": {"cmd": fake_model_cmd("two")},
        }
    )
    stack.write_config(cfg)
    assert "stopped changed models: one" in stack.swapd("reload").stdout
    assert {m["model"] for m in stack.status()["models"]} == {"one", "two"}
    stack.config_path.write_text("models: [this is not a mapping\n")
    rejected = stack.swapd("reload", check=False)
    assert rejected.returncode == 1 and "config.yaml" in rejected.stderr
    assert chat(stack.url, "two")["served_by"]["name"] == "two"


__all__ = ["PYTHON", "config", "ensure", "wait_for"]


def test_preload_starts_a_model_without_a_request(stack_factory) -> None:
    stack = stack_factory(
        config(
            {"early": {"cmd": fake_model_cmd("early")}, "late": {"cmd": fake_model_cmd("late")}},
            hooks={"on_startup": {"preload": ["early"]}},
        )
    )
    entry = stack.wait_state("early", "ready")
    assert stack.model("late")["state"] == "stopped"
    assert chat(stack.url, "early")["served_by"]["pid"] == entry["pid"]
