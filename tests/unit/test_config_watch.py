"""`--watch-config`'s loop (daemon/config_watch.py) over a stand-in for the config's files
(`ConfigSources.stamp`, what the loop compares): it reloads once the files stopped changing for
the quiet period, never while a save is still under way (issue 29, finding 8); a refused reload
is the reload's own one log line, with no traceback after it (finding 7)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from swapd.daemon import config_watch
from swapd.daemon.errors import InvalidConfig

INTERVAL = 0.005
QUIET = 0.05


class Files:
    """What `stamp()` answers: `value`, or a new value at every look while `changing`."""

    def __init__(self) -> None:
        self.value: Any = ("config.yaml", 1)
        self.changing = False
        self.looks = 0
        self.look = asyncio.Event()

    def stamp(self) -> Any:
        self.looks += 1
        self.look.set()
        if self.changing:
            self.value = ("config.yaml", self.looks)
        return self.value

    async def looked(self, times: int) -> None:
        """Until the loop has looked `times` more times."""
        for _ in range(times):
            self.look.clear()
            await asyncio.wait_for(self.look.wait(), 10)


class Reloads:
    def __init__(self, fail: bool = False) -> None:
        self.count = 0
        self.fail = fail
        self.happened = asyncio.Event()

    async def __call__(self) -> None:
        self.count += 1
        self.happened.set()
        if self.fail:
            raise InvalidConfig("config.yaml:3 models.a.ttl: expected a number")

    async def next(self) -> None:
        await asyncio.wait_for(self.happened.wait(), 10)
        self.happened.clear()


async def _watching(files: Files, reloads: Reloads) -> asyncio.Task[None]:
    task = asyncio.create_task(config_watch.watch(files, reloads, INTERVAL, QUIET))  # type: ignore[arg-type]
    await files.looked(2)
    return task


async def test_a_save_in_steps_is_reloaded_once_after_it_settles() -> None:
    files, reloads = Files(), Reloads()
    task = await _watching(files, reloads)
    try:
        files.changing = True  # a save under way: a new stamp at every look
        await files.looked(40)  # many times the quiet period's worth of looks
        assert reloads.count == 0
        files.changing = False
        await reloads.next()
        await files.looked(int(3 * QUIET / INTERVAL))
        assert reloads.count == 1  # once for the whole save, and not again while it stays
    finally:
        task.cancel()


async def test_nothing_changed_nothing_reloaded_and_unreadable_is_no_change() -> None:
    files, reloads = Files(), Reloads()
    task = await _watching(files, reloads)
    try:
        files.value = None  # mid-rename: the file cannot be read
        await files.looked(int(3 * QUIET / INTERVAL))
        files.value = ("config.yaml", 1)  # back as it was
        await files.looked(int(3 * QUIET / INTERVAL))
        assert reloads.count == 0
        files.value = ("config.yaml", 2)
        await reloads.next()
    finally:
        task.cancel()


async def test_a_refused_reload_leaves_no_traceback_and_the_watch_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    files, reloads = Files(), Reloads(fail=True)
    task = await _watching(files, reloads)
    try:
        with caplog.at_level(logging.DEBUG, logger="swapd.daemon"):
            files.value = ("config.yaml", 2)
            await reloads.next()
            files.value = ("config.yaml", 3)
            await reloads.next()
    finally:
        task.cancel()
    assert reloads.count == 2
    assert [r.levelname for r in caplog.records] == ["INFO", "INFO"]  # "changed; reloading"
    assert not any(r.exc_info for r in caplog.records)


async def test_an_unexpected_failure_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    files = Files()
    failed = asyncio.Event()

    async def broken() -> None:
        failed.set()
        raise RuntimeError("a bug, not a refused file")

    task = asyncio.create_task(config_watch.watch(files, broken, INTERVAL, QUIET))  # type: ignore[arg-type]
    try:
        with caplog.at_level(logging.ERROR, logger="swapd.daemon"):
            await files.looked(2)
            files.value = ("config.yaml", 2)
            await asyncio.wait_for(failed.wait(), 10)
            await files.looked(2)
    finally:
        task.cancel()
    assert any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("", 1.0), ("2.5", 2.5), ("0", 0.0), ("-1", 1.0), ("soon", 1.0), ("nan", 1.0)],
)
def test_the_quiet_period_from_the_environment(
    raw: str, seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config_watch.QUIET_ENV, raw)
    assert config_watch.quiet_period() == seconds
