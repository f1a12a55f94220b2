"""The daemon's circus client and process machinery against a real circusd (no daemon, no proxy):
concurrent calls, timeouts, circus's global lock, and a slow stop that does not stall a start."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import time
from typing import Any

import pytest

from swapd.daemon.config import ModelConfig
from swapd.daemon.machinery.circus_client import CircusClient, CircusError, CircusUnavailable
from swapd.daemon.machinery.lifecycle import Lifecycle, StartFailed
from tests.support.circus import _model
from tests.support.stack import free_port_range

pytestmark = pytest.mark.processes

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


async def test_concurrent_calls_are_matched_by_id(circus) -> None:
    client, _ = circus
    replies = await asyncio.gather(*(client.call("list") for _ in range(50)))
    assert all(r["status"] == "ok" for r in replies)
    assert len({r["id"] for r in replies}) == 50


async def test_error_reply_and_timeout() -> None:
    client = CircusClient("ipc:///tmp/swapd-no-such-circusd.sock", timeout=0.3)
    started = time.monotonic()
    with pytest.raises(CircusUnavailable):
        await client.call("list")
    assert time.monotonic() - started < 1.5
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
    stubborn = ModelConfig(**{**_fields(stubborn), "check_endpoint": None})
    try:
        running = await lifecycle.start(stubborn)
        await _until_ignoring_sigterm(running.pid)
        stopping = asyncio.create_task(lifecycle.stop(running, stubborn))
        await asyncio.sleep(0.1)
        started = time.monotonic()
        other = await lifecycle.start(_model("other", port_b))
        took = time.monotonic() - started
        assert not stopping.done(), "the stubborn model should still be in its grace period"
        assert took < 1.5, f"a start waited {took:.2f}s behind a slow stop"
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


def _ignores_sigterm(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        ignored = next(line for line in f if line.startswith("SigIgn:")).split()[1]
    return bool(int(ignored, 16) & (1 << (signal.SIGTERM - 1)))


async def _until_ignoring_sigterm(pid: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        if _ignores_sigterm(pid):
            return
        assert time.monotonic() < deadline, "the stubborn process never ignored SIGTERM"
        await asyncio.sleep(0.02)


async def test_health_check_timeout_stops_the_process(circus) -> None:
    # healthCheckTimeout is never below 15 s in a config file (llama-swap's minimum); built
    # directly here, 1 s keeps the test short.
    client, base = circus
    lifecycle = Lifecycle(client, base / "logs")
    port = free_port_range(1)
    sleepy = ModelConfig(
        **{**_fields(_model("sleepy", port, "--health-delay", "600")), "health_check_timeout": 1}
    )
    # When the process is up (the "start" phase ends) and when the daemon gives up on it (it
    # stops it): the health wait itself, without the spawn and the stop around it, which take
    # seconds more when the machine is loaded and are not what this test times.
    moments: dict[str, float] = {}
    lifecycle.on_phase = lambda _model, phase, _seconds: moments.setdefault(phase, time.monotonic())
    stop = lifecycle.stop

    async def stop_noted(*args: Any, **kwargs: Any) -> Any:
        moments.setdefault("gave up", time.monotonic())
        return await stop(*args, **kwargs)

    lifecycle.stop = stop_noted  # type: ignore[method-assign]
    try:
        with pytest.raises(StartFailed) as failed:
            await lifecycle.start(sleepy)
        assert 1.0 <= moments["gave up"] - moments["start"] < 5
        assert failed.value.status == 504 and failed.value.code == "health_check_timeout"
        assert "timed out after 1s" in failed.value.message
        assert any("fake model sleepy starting" in line for line in failed.value.log_tail)
        assert "model-sleepy" not in (await client.call("status"))["statuses"]
        # Its port is free again: the process is gone, not just forgotten.
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))
    finally:
        await lifecycle.close()


def _fields(model: ModelConfig) -> dict[str, object]:
    return {f: getattr(model, f) for f in model.__struct_fields__}
