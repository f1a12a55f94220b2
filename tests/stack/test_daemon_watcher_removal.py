"""When the daemon removes a stopped model's circus watcher, against a real circusd (no daemon, no
proxy): a swap's stop leaves the `rm` until the next start has spawned, so that start does not
queue behind it; a swap straight back to the same model waits for that `rm` before its `add`; a
watcher left behind by an earlier run is replaced."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from swapd.daemon.machinery.circus_client import CircusClient
from swapd.daemon.machinery.lifecycle import Lifecycle
from swapd.daemon.machinery.watchers import REMOVE_DEFER_MAX
from tests.support.circus import _model
from tests.support.stack import free_port_range

pytestmark = pytest.mark.processes


def record(client: CircusClient) -> list[tuple[str, str]]:
    """Every (command, watcher) the client sends from now on, in order."""
    sent: list[tuple[str, str]] = []
    call = client.call

    async def recording(command: str, **props: Any) -> dict[str, Any]:
        sent.append((command, str(props.get("name", ""))))
        return await call(command, **props)

    client.call = recording  # type: ignore[method-assign]
    return sent


async def watchers(client: CircusClient) -> dict[str, str]:
    return dict((await client.call("status"))["statuses"])


async def until_gone(client: CircusClient, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while name in await watchers(client):
        assert time.monotonic() < deadline, f"{name} was never removed"
        await asyncio.sleep(0.01)


async def test_a_swap_removes_the_old_watcher_after_the_new_start(circus) -> None:
    client, base = circus
    lifecycle = Lifecycle(client, base / "logs")
    port = free_port_range(2)
    a, b = _model("a", port), _model("b", port + 1)
    try:
        first = await lifecycle.start(a)
        sent = record(client)
        await lifecycle.stop(first, a, defer_remove=True)
        assert "model-a" in await watchers(client), "the rm should wait for the next spawn"
        second = await lifecycle.start(b)
        await until_gone(client, "model-a", 5.0)
        # The start is circus's `add` with `start` (one command); the `rm` only after it.
        lifecycle_calls = [c for c in sent if c[0] in ("add", "start", "rm")]
        assert lifecycle_calls == [("add", "model-b"), ("rm", "model-a")]

        # A plain stop (unload, TTL) removes its watcher before it returns.
        await lifecycle.stop(second, b)
        assert "model-b" not in await watchers(client)
    finally:
        await lifecycle.close()


async def test_a_deferred_rm_with_no_start_after_it_still_runs(circus) -> None:
    client, base = circus
    lifecycle = Lifecycle(client, base / "logs")
    a = _model("a", free_port_range(1))
    try:
        running = await lifecycle.start(a)
        await lifecycle.stop(running, a, defer_remove=True)
        assert "model-a" in await watchers(client), "removed at once: it was not deferred"
        await until_gone(client, "model-a", REMOVE_DEFER_MAX + 5.0)
    finally:
        await lifecycle.close()


async def test_swapping_straight_back_waits_for_the_pending_rm(circus) -> None:
    client, base = circus
    lifecycle = Lifecycle(client, base / "logs")
    a = _model("a", free_port_range(1))
    try:
        first = await lifecycle.start(a)
        sent = record(client)
        await lifecycle.stop(first, a, defer_remove=True)
        again = await lifecycle.start(a)
        assert again.pid != first.pid
        assert [c for c in sent if c[0] in ("add", "start", "rm")] == [
            ("rm", "model-a"),
            ("add", "model-a"),  # with `start`: one command
        ]
        assert (await watchers(client))["model-a"] == "active"
        await lifecycle.stop(again, a)
    finally:
        await lifecycle.close()


async def test_a_watcher_left_behind_is_replaced(circus) -> None:
    # An earlier daemon died between `add` and `start`: its watcher holds the name.
    client, base = circus
    lifecycle = Lifecycle(client, base / "logs")
    a = _model("a", free_port_range(1))
    try:
        await client.call("add", name="model-a", cmd="/bin/false", args=[], options={})
        running = await lifecycle.start(a)
        assert (await watchers(client))["model-a"] == "active"
        assert running.pid in (await client.call("list", name="model-a"))["pids"]
        await lifecycle.stop(running, a)
    finally:
        await lifecycle.close()
