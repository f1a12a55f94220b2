"""The daemon's circus client and process machinery against a real circusd (no daemon, no proxy):
concurrent calls, timeouts, circus's global lock, and a slow stop that does not stall a start."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
from msgspec.structs import replace

from swapd.daemon.machinery import model_log
from swapd.daemon.machinery.circus_client import CircusClient, CircusError, CircusUnavailable
from swapd.daemon.machinery.lifecycle import Lifecycle, StartFailed
from tests.support.circus import _model
from tests.support.stack import free_port_range

pytestmark = pytest.mark.processes

# Outlives SIGTERM, and says when it got one (a stop under way) in its output. (The words are put
# together at run time: the log's first line quotes the command, which must not say them.)
STUBBORN = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: print('got %s' % 'SIGTERM', flush=True))\n"
    "print('outliving %s' % 'SIGTERM', flush=True)\n"
    "time.sleep(600)\n"
)


async def test_concurrent_calls_are_matched_by_id(circus) -> None:
    client, _ = circus
    replies = await asyncio.gather(*(client.call("list") for _ in range(50)))
    assert all(r["status"] == "ok" for r in replies)
    assert len({r["id"] for r in replies}) == 50


async def test_error_reply_and_timeout() -> None:
    client = CircusClient("ipc:///tmp/swapd-no-such-circusd.sock", timeout=0.3)
    # circus's own client ignores its timeout and waits for ever; this one gives up after it.
    with pytest.raises(CircusUnavailable) as gave_up:
        await client.call("list")
    assert "within 0.3s" in str(gave_up.value)
    client.close()


async def test_unknown_watcher_is_a_circus_error(circus) -> None:
    client, _ = circus
    with pytest.raises(CircusError) as err:
        await client.call("status", name="nope")
    assert not err.value.lock_busy


async def test_global_lock_is_retried(circus) -> None:
    client, _ = circus
    await client.call(
        "add",
        name="stubborn",
        cmd=sys.executable,
        args=["-c", STUBBORN],
        options={"graceful_timeout": 1.5},
        start=True,
        waiting=True,
    )
    # circus's own stop holds the arbiter-wide lock for the whole grace period...
    await client.call("stop", name="stubborn", waiting=False)
    with pytest.raises(CircusError) as busy:
        await client.call("add", name="other", cmd=sys.executable, args=["-c", "pass"])
    assert busy.value.lock_busy
    # ...so lifecycle commands wait for it and retry.
    reply = await client.call_locked(
        "add", name="other", cmd=sys.executable, args=["-c", "pass"], patience=10
    )
    assert reply["status"] == "ok"


async def test_a_slow_stop_does_not_stall_another_start(circus) -> None:
    client, base = circus
    lifecycle = Lifecycle(client, base / "logs")
    port_a = free_port_range(2)
    port_b = port_a + 1
    stubborn = _model("stubborn", port_a, cmd=(sys.executable, "-c", STUBBORN))
    # A grace period far longer than any start: the stop is still in it when the start returns,
    # unless the start waited for the stop.
    stubborn = replace(stubborn, check_endpoint=None, unload_timeout=120)
    output = model_log.log_path(base / "logs", "stubborn")
    try:
        running = await lifecycle.start(stubborn)
        await _until_logged(output, "outliving SIGTERM")
        stopping = asyncio.create_task(lifecycle.stop(running, stubborn))
        await _until_logged(output, "got SIGTERM")  # the stop is under way, in its grace period
        other = await lifecycle.start(_model("other", port_b))
        assert not stopping.done(), "the start waited for the stubborn model's stop"
        os.kill(running.pid, signal.SIGKILL)  # ends the grace period: the stop completes
        await stopping
        statuses = (await client.call("status"))["statuses"]
        assert "model-stubborn" not in statuses and statuses["model-other"] == "active"
        await lifecycle.stop(other, None)
    finally:
        await lifecycle.close()


async def test_a_process_that_exits_at_once_fails_with_its_code(circus) -> None:
    client, base = circus
    lifecycle = Lifecycle(client, base / "logs")
    port = free_port_range(1)
    try:
        with pytest.raises(StartFailed) as failed:
            await lifecycle.start(_model("bad", port, "--fail", "--exit-code", "9"))
        assert failed.value.status == 502
        assert "exit code 9" in failed.value.message
        assert any("cannot load its weights" in line for line in failed.value.log_tail)
    finally:
        await lifecycle.close()


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


async def _until_logged(path: Path, text: str) -> None:
    deadline = time.monotonic() + 30
    while text not in await asyncio.to_thread(_read, path):
        assert time.monotonic() < deadline, f"{path.name} never said {text!r}"
        await asyncio.sleep(0.02)


async def test_health_check_timeout_stops_the_process(circus) -> None:
    # healthCheckTimeout is never below 15 s in a config file (llama-swap's minimum); built
    # directly here, 1 s keeps the test short.
    client, base = circus
    lifecycle = Lifecycle(client, base / "logs")
    port = free_port_range(1)
    model = _model("sleepy", port, "--health-delay", "600")
    # The first line comes from the shell before Python starts, so it is in the log however
    # loaded the machine is when the second runs out (the interpreter's start can take longer).
    first = "sleepy: spawned"
    sh = ("/bin/sh", "-c", f"echo {first}; exec {shlex.join(model.cmd)}")
    sleepy = replace(model, cmd=sh, health_check_timeout=1)
    try:
        with pytest.raises(StartFailed) as failed:
            await lifecycle.start(sleepy)
        assert failed.value.status == 504 and failed.value.code == "health_check_timeout"
        assert "timed out after 1s" in failed.value.message
        assert first in failed.value.log_tail
        assert "model-sleepy" not in (await client.call("status"))["statuses"]
        # Its port is free again: the process is gone, not just forgotten.
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))
    finally:
        await lifecycle.close()
