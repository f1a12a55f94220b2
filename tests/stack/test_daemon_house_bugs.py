"""Bugs found when swapd was tried as a llama-swap user would try it, each through the real stack:
preload only when swapd starts, `swapd status` on a machine without GPUs, the last activity of a
restarted model, and circusd's log free of lock-conflict tracebacks."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from swapd.ipc.client import DaemonClient
from swapd.ipc.endpoints import Endpoints
from swapd.ipc.messages import Activity, Ready
from tests.support.daemon import chat, config, ensure
from tests.support.stack import fake_model_cmd, wait_for

pytestmark = pytest.mark.processes


def test_preload_runs_when_swapd_starts_not_when_the_daemon_restarts(stack_factory) -> None:
    stack = stack_factory(
        config(
            {"early": {"cmd": fake_model_cmd("early")}, "late": {"cmd": fake_model_cmd("late")}},
            hooks={"on_startup": {"preload": ["early"]}},
        )
    )
    stack.wait_state("early", "ready")
    late_pid = chat(stack.url, "late")["served_by"]["pid"]  # the user's choice: early swapped out
    assert stack.model("early")["state"] == "stopped"

    stack.kill_watcher("swapd-daemon", signal.SIGKILL)
    wait_for(
        lambda: stack.model("late")["reason"] == "adopted", 15, what="the new daemon to adopt late"
    )
    # A preload would have claimed late for eviction at once (its swap starts at bind time).
    assert chat(stack.url, "late")["served_by"]["pid"] == late_pid
    states = {m["model"]: (m["state"], m["pid"]) for m in stack.status()["models"]}
    assert states == {"early": ("stopped", None), "late": ("ready", late_pid)}
    assert stack.model_log("early").count("--- swapd") == 1


def test_status_shows_no_gpus_on_a_machine_without_any(stack_factory) -> None:
    # SWAPD_GPU_BACKEND=none stands for a host without NVIDIA's driver, whatever this host has.
    stack = stack_factory(
        config({"cpu": {"cmd": fake_model_cmd("cpu")}}), env={"SWAPD_GPU_BACKEND": "none"}
    )
    chat(stack.url, "cpu")
    table = stack.swapd("status").stdout.splitlines()
    header = next(line for line in table if line.startswith("MODEL"))
    row = next(line for line in table if line.startswith("cpu "))
    column = header.index("GPUS")
    assert row[column:].split()[0] == "-", table
    assert stack.model("cpu")["gpus"] == []


async def test_last_activity_belongs_to_the_running_instance(stack_factory) -> None:
    stack = stack_factory(config({"m": {"cmd": fake_model_cmd("m")}}))
    endpoints = Endpoints(stack.run_dir)
    ready = await ensure(stack.run_dir, "m")
    assert isinstance(ready, Ready)
    # A proxy's report of a request to this first instance.
    client = DaemonClient(endpoints.daemon)
    try:
        await client.cast(Activity(proxy_id="test", model="m", in_flight=0, at=time.time()))
        await asyncio.to_thread(
            wait_for, lambda: stack.model("m")["last_activity"] > 0, 5, 0.05, "the report"
        )
    finally:
        client.close()
    first = stack.model("m")
    stack.swapd("unload", "m")
    again = await ensure(stack.run_dir, "m")  # a new instance, which no request has used yet
    assert isinstance(again, Ready)
    second = stack.model("m")
    assert second["pid"] != first["pid"]
    assert second["last_activity"] == 0.0  # not the first instance's, older than its uptime
    assert "ago" not in next(
        line for line in stack.swapd("status").stdout.splitlines() if line.startswith("m ")
    )


def test_circusd_logs_no_lock_conflict_during_swaps_and_shutdown(stack_factory) -> None:
    stack = stack_factory(
        config(
            {
                "alpha": {"cmd": fake_model_cmd("alpha")},
                # Ignores SIGTERM: circusd's own shutdown holds its lock for its unloadTimeout.
                "beta": {"cmd": fake_model_cmd("beta", "--ignore-sigterm"), "unloadTimeout": 2.5},
            }
        )
    )
    for _ in range(4):
        assert chat(stack.url, "alpha")["served_by"]["name"] == "alpha"
        assert chat(stack.url, "beta")["served_by"]["name"] == "beta"
    stack.stop()
    output = stack.output()
    assert "ConflictError" not in output, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
