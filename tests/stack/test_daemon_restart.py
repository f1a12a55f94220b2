"""Restart without loss: kill -9 of the daemon or of the proxy; circusd restarts it, the models
keep running (same pid), and requests keep being served."""

from __future__ import annotations

import signal
import threading

import pytest

from tests.support.daemon import _alive, chat, config
from tests.support.stack import fake_model_cmd, wait_for

pytestmark = pytest.mark.processes


def test_daemon_kill9_adopts_running_models(stack_factory) -> None:
    stack = stack_factory(config({"keep": {"cmd": fake_model_cmd("keep")}}))
    model_pid = chat(stack.url, "keep")["served_by"]["pid"]
    (proxy_pid,) = stack.watcher_pids("swapd-proxy")

    # Requests keep flowing while the daemon is dead and while it comes back.
    served: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            try:
                served.append(chat(stack.url, "keep")["served_by"]["pid"])
            except BaseException as exc:
                errors.append(exc)

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        new_daemon = stack.kill_watcher("swapd-daemon", signal.SIGKILL, timeout=10)
        entry = stack.wait_state("keep", "ready")
        count = len(served)
        wait_for(lambda: len(served) > count + 5, timeout=10, what="more requests served")
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:3]
    assert set(served) == {model_pid}
    assert entry["pid"] == model_pid
    assert entry["reason"] == "adopted"
    assert stack.status()["pid"] == new_daemon
    assert stack.watcher_pids("swapd-proxy") == [proxy_pid]
    assert stack.model_log("keep").count("--- swapd") == 1, "the model was started again"


def test_proxy_kill9_keeps_models_loaded(stack_factory) -> None:
    stack = stack_factory(config({"keep": {"cmd": fake_model_cmd("keep")}}))
    model_pid = chat(stack.url, "keep")["served_by"]["pid"]
    (daemon_pid,) = stack.watcher_pids("swapd-daemon")
    stack.kill_watcher("swapd-proxy", signal.SIGKILL, timeout=10)
    served = wait_for(lambda: chat(stack.url, "keep"), timeout=10, what="the new proxy to serve")
    assert served["served_by"]["pid"] == model_pid
    assert stack.model("keep")["pid"] == model_pid
    assert stack.watcher_pids("swapd-daemon") == [daemon_pid]
    assert stack.model_log("keep").count("--- swapd") == 1


def test_restarted_daemon_stops_what_no_longer_matches_its_config(stack_factory) -> None:
    models = {"same": {"cmd": fake_model_cmd("same")}, "edited": {"cmd": fake_model_cmd("edited")}}
    cfg = config(models, groups={"all": {"swap": False, "members": ["same", "edited"]}})
    stack = stack_factory(cfg)
    same = chat(stack.url, "same")["served_by"]["pid"]
    edited = chat(stack.url, "edited")["served_by"]["pid"]
    # The file changes while the daemon is down (no reload): the next daemon reads the new one.
    cfg["models"]["edited"]["cmd"] = fake_model_cmd("edited", "--health-delay", "0")
    stack.write_config(cfg)
    stack.kill_watcher("swapd-daemon", signal.SIGKILL, timeout=10)
    assert stack.wait_state("same", "ready")["pid"] == same
    assert stack.wait_state("edited", "stopped")["pid"] is None
    wait_for(lambda: not _alive(edited), timeout=5, what="the outdated process to stop")
    assert "model-edited" not in stack.circusctl("list")


def test_a_model_starting_when_the_daemon_died_is_adopted_once_healthy(stack_factory) -> None:
    stack = stack_factory(config({"slow": {"cmd": fake_model_cmd("slow", "--health-delay", "2")}}))
    answers: list[dict[str, object]] = []
    client = threading.Thread(target=lambda: answers.append(chat(stack.url, "slow")), daemon=True)
    client.start()
    stack.wait_state("slow", "starting")
    (model_pid,) = wait_for(lambda: stack.watcher_pids("model-slow"), what="the model's pid")
    stack.kill_watcher("swapd-daemon", signal.SIGKILL, timeout=10)
    entry = stack.wait_state("slow", "ready", timeout=15)
    assert entry["pid"] == model_pid
    assert stack.model_log("slow").count("--- swapd") == 1
    # The request that was waiting on the dead daemon's Ensure is answered too.
    client.join(15)
    assert answers and answers[0]["served_by"]["pid"] == model_pid
