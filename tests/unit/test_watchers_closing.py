"""A watcher's `rm` under way when circusd starts shutting everything down. circusd then holds its
lock until every watcher has stopped, the daemon's own included, so the `rm` is refused as "lock
busy" and retried for as long as `call_locked`'s patience (60 s). Closing drops it, since circusd
removes the watcher itself; otherwise the daemon's exit waits for the stop that waits for the
`rm`, and swapd overruns its own stop timeout (seen once in the suite)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from swapd.daemon.machinery.watchers import Watchers


class _ShuttingDownCircus:
    """Stands for circusd while it stops everything: a lifecycle command is never answered
    (the real client goes on retrying it while the lock is busy)."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.asked = asyncio.Event()

    async def call_locked(self, command: str, **_: Any) -> dict[str, Any]:
        self.commands.append(command)
        self.asked.set()
        await asyncio.Event().wait()
        raise AssertionError("not reached")


async def test_closing_drops_an_rm_under_way() -> None:
    circus = _ShuttingDownCircus()
    watchers = Watchers(circus)  # type: ignore[arg-type]
    stop = asyncio.ensure_future(watchers.remove("m"))
    await asyncio.wait_for(circus.asked.wait(), 5)
    assert not stop.done()
    watchers.closing = True
    await asyncio.wait_for(stop, 5)  # returns, without an error: circusd drops the watcher
    assert circus.commands == ["rm"]
    await watchers.remove("other")  # once closing, no `rm` is asked for at all
    assert circus.commands == ["rm"]


async def test_a_stop_cancelled_while_its_rm_runs_is_still_cancelled() -> None:
    circus = _ShuttingDownCircus()
    watchers = Watchers(circus)  # type: ignore[arg-type]
    stop = asyncio.ensure_future(watchers.remove("m"))
    await asyncio.wait_for(circus.asked.wait(), 5)
    stop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stop
    watchers.closing = True  # and the rm left behind is dropped too
    await watchers.close()
