"""swapd's changes to circus 0.19 (`daemon/cli/circusd.py`), against circus's own `Watcher` run in
this process with a real child process: a watcher's tick that finds its process already a zombie
publishes circus's `reap` event, with the exit code, before the watcher stops; unpatched circus
drops the zombie without one, and the dropped process object reaps it (the daemon then reports
"an unknown exit code"). A process that still runs is left alone, and the tick does not wait."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator

import psutil
import pytest
from circus.process import DEAD_OR_ZOMBIE
from circus.watcher import Watcher

from swapd.daemon.cli import circusd


class _Pub:
    """circus's event socket, as a watcher uses it."""

    closed = False

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, object]]] = []

    def send_multipart(self, parts: list[bytes | str]) -> None:
        topic, body = parts
        name = topic.decode() if isinstance(topic, bytes) else topic
        self.events.append((name.rsplit(".", 1)[1], json.loads(body)))


@pytest.fixture
def unpatched(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Whatever a test patches is put back afterwards.
    monkeypatch.setattr(Watcher, "manage_processes", Watcher.__dict__["manage_processes"])
    yield


async def _watch(command: str) -> tuple[Watcher, _Pub, int]:
    watcher = Watcher("model-x", command, respawn=False, singleton=True, copy_env=True)
    pub = _Pub()
    watcher.evpub_socket = pub
    await watcher._start()
    (pid,) = watcher.processes
    return watcher, pub, pid


async def _zombie(code: int) -> tuple[Watcher, _Pub, int]:
    watcher, pub, pid = await _watch(f"{sys.executable} -c 'raise SystemExit({code})'")
    deadline = time.monotonic() + 10
    while watcher.processes[pid].status != DEAD_OR_ZOMBIE:
        assert time.monotonic() < deadline, "the child never exited"
        await asyncio.sleep(0.01)
    return watcher, pub, pid


async def test_unpatched_circus_drops_a_zombie_without_a_reap_event(unpatched: None) -> None:
    watcher, pub, pid = await _zombie(7)
    await watcher.manage_processes()
    kinds = [kind for kind, _ in pub.events]
    assert "reap" not in kinds and kinds[-1] == "stop" and not watcher.processes
    # And no zombie is left to read the code from: dropping the process object reaped it
    # (subprocess's `Popen.__del__` polls a child it still thinks runs).
    assert not psutil.pid_exists(pid)


async def test_the_patched_tick_reaps_the_zombie_with_its_exit_code(unpatched: None) -> None:
    assert circusd.patch_manage_processes()
    assert circusd.patch_manage_processes()  # twice: patched once
    watcher, pub, pid = await _zombie(7)
    await watcher.manage_processes()
    kinds = [kind for kind, _ in pub.events]
    reaps = [body for kind, body in pub.events if kind == "reap"]
    assert reaps == [{"process_pid": pid, "time": reaps[0]["time"], "exit_code": 7}]
    assert kinds.index("reap") < kinds.index("stop") and not watcher.processes
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


async def test_the_patched_tick_leaves_a_running_process_alone(unpatched: None) -> None:
    assert circusd.patch_manage_processes()
    watcher, pub, pid = await _watch(f"{sys.executable} -c 'import time; time.sleep(600)'")
    try:
        await watcher.manage_processes()
        # The tick came back while the process runs on: it did not wait for it.
        assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        assert list(watcher.processes) == [pid]
        assert "reap" not in [kind for kind, _ in pub.events]
    finally:
        await watcher._stop()
