"""The combined log's ring (proxy/observe/combined_log.py) without a stack: it follows a log file's
rotation and keeps whole lines."""

from __future__ import annotations

import asyncio
from pathlib import Path

from swapd.ipc.routing_table import RouteModel, RoutingTable
from swapd.proxy.mirror.state import ProxyState
from swapd.proxy.observe.backlog import PIECE_BYTES
from swapd.proxy.observe.combined_log import COMBINED_BYTES, READ_MAX, CombinedLog
from swapd.proxy.observe.log_files import model_log_path
from swapd.proxy.observe.log_hub import HISTORY_BYTES, LogHub


def _state(log_dir: Path, *ids: str) -> ProxyState:
    state = ProxyState()
    models = tuple(
        RouteModel(id=i, upstream="http://127.0.0.1:9", concurrency_limit=1, ttl=0) for i in ids
    )
    state._apply_table(RoutingTable(generation=1, models=models, log_dir=str(log_dir)))
    return state


async def _until(log: CombinedLog, text: bytes) -> bytes:
    # The ring itself is what is observed: the older lines it starts with reach no subscriber.
    async with asyncio.timeout(5):
        while text not in log.history():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    return log.history()


def test_the_ring_follows_rotation_and_keeps_whole_lines(tmp_path: Path) -> None:
    """The combined log's own rules, on real files with a real `LogHub` and `ProxyState`: the
    models' older lines before the proxy's, a truncated (rotated) file followed from its start,
    partial lines held until whole, a model the table gains from then on, and the ring cut at a
    line start."""
    a = model_log_path(str(tmp_path), "a")
    a.write_bytes(b"old a line\n")

    async def scenario() -> None:
        hub = LogHub()
        hub.feed(b"proxy line 1\n")
        state = _state(tmp_path, "a")
        log = CombinedLog(hub, state)
        log.start()
        try:
            text = await _until(log, b"[a] old a line\n")
            assert text == b"[a] old a line\nproxy line 1\n"
            with a.open("ab") as f:
                f.write(b"half")
            hub.feed(b"proxy line 2\n")
            with a.open("ab") as f:
                f.write(b" and the rest\n")
            text = await _until(log, b"[a] half and the rest\n")
            assert text.endswith(b"proxy line 2\n[a] half and the rest\n")
            a.write_bytes(b"rotated\n")  # truncated: read again from the start
            await _until(log, b"[a] rotated\n")
            b = model_log_path(str(tmp_path), "b")
            b.write_bytes(b"b before it was in the table\n")
            grown = _state(tmp_path, "a", "b")
            state._apply_table(grown.routes.table)
            async with asyncio.timeout(5):
                while "b" not in log.following():  # noqa: ASYNC110 (taken up at its end)
                    await asyncio.sleep(0.02)
            with b.open("ab") as f:
                f.write(b"b new\n")
            text = await _until(log, b"[b] b new\n")
            assert b"b before" not in text
            hub.feed(b"x" * 100 + b"\n")
            for _ in range(COMBINED_BYTES // 100):
                hub.feed(b"y" * 99 + b"\n")
            ring = log.history()
            assert len(ring) <= COMBINED_BYTES and ring.startswith(b"y")
        finally:
            await log.close()

    asyncio.run(scenario())


def test_long_lines_are_cut_and_each_model_keeps_its_own_output(tmp_path: Path) -> None:
    """A 200 KiB line is three lines of at most 64 KiB in the prefixed views, cut between
    characters; the model's own ring has its end as written, and a file grown by more than a read
    takes is read a piece at a time."""
    a = model_log_path(str(tmp_path), "a")
    a.write_bytes(b"")

    async def scenario() -> None:
        state = _state(tmp_path, "a")
        log = CombinedLog(LogHub(), state)
        log.start()
        try:
            ring = await log.model("a")
            assert ring is not None and await log.model("nope") is None
            line = "ü".encode() * (100 * 1024) + b"\n"
            with a.open("ab") as f:
                f.write(b"x" * (READ_MAX + 10) + b"\n" + line)
            async with asyncio.timeout(5):
                while not log.upstream.history().endswith(b"\xbc\n"):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            tail = log.upstream.history().splitlines(keepends=True)[-4:]
            assert all(len(t) <= len(b"[a] \n") + PIECE_BYTES for t in tail)
            cut = b"".join(t.removeprefix(b"[a] ").removesuffix(b"\n") for t in tail[-4:])
            assert cut.endswith(line[:-1][-len(cut) :]) and cut.decode().count("ü") > 0
            own = ring.history()  # the last 100 KiB of the line, from a character's start
            assert 0 < len(own) <= HISTORY_BYTES and line.endswith(own) and own[0] == 0xC3
            assert log.counters()["followed"] == 1
        finally:
            await log.close()

    asyncio.run(scenario())
