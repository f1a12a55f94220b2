"""Readers that cannot hurt anyone (issue 29, items 1 and 3), against the real stack: clients of
`/api/events` and `/logs/stream*` that stop reading while a model writes a 20 MB line cost the
proxy a bounded amount of memory, the line reaches a client that reads in events of bounded size,
a stalled subscriber that reads again is told what it lost and resynced; and however many
clients follow the logs, one follower in the proxy looks at each model's file, and what a new
client is sent first is bounded."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest

from tests.support import llama_ui
from tests.support.hostile import peak_rss, proxy_process, reset_peak_rss
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.timeout(240)]

PIECE = 64 * 1024  # the most text one logData event carries (proxy/observe/backlog.py)
HISTORY = 100 * 1024  # what a log ring keeps (proxy/observe/log_hub.py)
MiB = 1024 * 1024


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    a, b = model_ports(2)
    return stack_factory(
        {"healthCheckTimeout": 15, "models": {"a": local_model("a", a), "b": local_model("b", b)}}
    )


def _counters(stack: Stack) -> dict[str, Any]:
    return dict(stack.get_ok("/running")["proxy"])


def _post(stack: Stack, path: str) -> int:
    request = urllib.request.Request(stack.url + path, data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=60) as resp:
        return int(resp.status)


def _sse_frames(sock: socket.socket) -> Iterator[tuple[str, Any]]:
    """The events of a raw `/api/events` response (its head, then chunked SSE), as read."""
    sock.settimeout(60)
    buffer = b""

    def more() -> None:
        nonlocal buffer
        data = sock.recv(1 << 20)
        if not data:
            raise EOFError("the proxy closed the stream")
        buffer += data

    while b"\r\n\r\n" not in buffer:
        more()
    buffer = buffer.split(b"\r\n\r\n", 1)[1]
    body = b""
    while True:
        while b"\r\n" not in buffer:
            more()
        size_line, rest = buffer.split(b"\r\n", 1)
        size = int(size_line, 16)
        while len(rest) < size + 2:
            more()
            rest = buffer.split(b"\r\n", 1)[1]
        body += rest[:size]
        buffer = rest[size + 2 :]
        while b"\n\n" in body:
            raw, body = body.split(b"\n\n", 1)
            envelope = json.loads(raw.split(b"data:", 1)[1])
            yield envelope["type"], json.loads(envelope["data"])


def _stalled(stack: Stack, path: str) -> socket.socket:
    """A client that asks for `path` and then reads nothing (a small receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", stack.port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{stack.port}\r\n\r\n".encode())
    return sock


async def _pump(frames: AsyncIterator[tuple[str, Any]], got: asyncio.Queue[Any]) -> None:
    async for item in frames:
        got.put_nowait(item)


async def _write(session: aiohttp.ClientSession, stack: Stack, path: str) -> None:
    async with session.get(stack.url + path) as out:
        assert out.status == 200, out.status


async def _until_logged(
    got: asyncio.Queue[tuple[str, Any]], text: str, seconds: float, seen: list[tuple[str, Any]]
) -> bool:
    """Reads events from `got` into `seen` until a `logData` with `text` (True), or until
    `seconds` pass without one (False)."""
    try:
        async with asyncio.timeout(seconds):
            while True:
                kind, data = await got.get()
                seen.append((kind, data))
                if kind == "logData" and text in data["data"]:
                    return True
    except TimeoutError:
        return False


async def test_stalled_readers_cost_a_bounded_amount_while_a_model_writes_20_mb(
    stack: Stack,
) -> None:
    assert stack.get_ok("/upstream/a/output?bytes=10&end=warm")["written"] == 10
    proc = proxy_process(stack)
    stalled = [_stalled(stack, "/api/events") for _ in range(10)]
    stalled += [_stalled(stack, "/logs/stream/upstream") for _ in range(2)]
    stalled += [_stalled(stack, "/logs/stream/a") for _ in range(2)]
    try:
        wait_for(lambda: _counters(stack)["events"]["subscribers"] == 10, 15, what="subscribers")
        before = proc.memory_info().rss
        reset_peak_rss(proc)
        async with (
            aiohttp.ClientSession() as session,
            session.get(stack.url + "/api/events") as resp,
        ):
            frames = llama_ui.events(resp)
            for _ in range(6):  # the snapshot
                await anext(frames)
            # One line of 20 MB, written while everyone else reads nothing.
            async with session.get(stack.url + "/upstream/a/output?bytes=20000000") as out:
                assert (await out.json())["written"] == 20_000_000
            got: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
            pump = asyncio.create_task(_pump(frames, got))
            seen: list[tuple[str, Any]] = []
            try:
                # The line's last pieces, and the line after it, may be lost to the fan-out
                # budget (for every subscriber at once); a marker line written once the budget
                # has room again reaches this reader. One a second, 60 at most.
                for n in range(60):
                    await _write(session, stack, f"/upstream/a/output?bytes=1&end=marker-{n}")
                    if await _until_logged(got, "[a] marker-", 1.0, seen):
                        break
                else:
                    raise AssertionError("none of 60 marker lines reached the reader")
            finally:
                pump.cancel()
            told = [data for kind, data in seen if kind == "eventsDropped"]
            logged = [d["data"] for k, d in seen if k == "logData" and d["source"] == "upstream"]
            longest = max(len(text.encode()) for text in logged)
        # The line's pieces went out in events of bounded size (the first ones fit the fan-out
        # budget and this reader's backlog; later ones may be lost, and the reader was told).
        assert PIECE // 2 < longest <= PIECE + len("[a] \n"), longest
        assert all(t["count"] > 0 and t["bytes"] > 0 for t in told)
        grown = peak_rss(proc) - before
        assert grown < 64 * MiB, f"the proxy grew by {grown / MiB:.0f} MiB at its peak"
        held = _counters(stack)["events"]
        assert held["buffered_bytes"] <= 10 * 1024 * 1024 + 10 * PIECE * 2, held
        assert held["lost"] > 0 and held["lost_bytes"] > 10 * MiB, held

        # The models' states change while the subscribers still read nothing. One that reads
        # again gets what it had queued, told where it lost events and how many (and, when a
        # state event was among them, the models' states afresh: tests/unit/test_activity_wire.py),
        # and sees the model stopped.
        assert _post(stack, "/api/models/unload/a") == 200
        running = lambda: {m["model"] for m in stack.get_ok("/running")["running"]}  # noqa: E731
        wait_for(lambda: "a" not in running(), 15, what="this proxy sees a stopped")
        frames = _sse_frames(stalled[0])
        seen: list[str] = []
        async with asyncio.timeout(60):
            while True:
                kind, data = await asyncio.to_thread(next, frames)
                seen.append(kind)
                if kind == "eventsDropped":
                    assert data["count"] > 0 and data["bytes"] > 0
                if kind == "modelStatus" and {m["id"]: m["state"] for m in data}["a"] == "stopped":
                    break
        assert "eventsDropped" in seen, seen[:20]
    finally:
        for sock in stalled:
            sock.close()
    wait_for(lambda: _counters(stack)["events"]["subscribers"] == 0, 15, what="all gone")


async def test_one_follower_for_every_reader_and_bounded_histories(stack: Stack) -> None:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        # Both models write 150 KiB (in 100-byte lines) to their logs, one after the other: b
        # only once a's last line is in the proxy's history, so b's lines come after all of a's
        # there whenever the follower reads each file.
        for model in ("a", "b"):
            path = f"/upstream/{model}/output?bytes=150000&line=100&end={model}-history"
            assert stack.get_ok(path)["written"] == 150000
            marker = f"[{model}] {model}-history\n".encode()
            async with session.get(stack.url + "/logs/stream/upstream") as reader:
                text = b""
                while marker not in text:
                    text += await asyncio.wait_for(reader.content.read(1 << 16), 30)
        await asyncio.to_thread(
            wait_for, lambda: _counters(stack)["logs"]["followed"] == 2, 15, what="both followed"
        )

        events = [await session.get(stack.url + "/api/events") for _ in range(100)]
        streams = [await session.get(stack.url + "/logs/stream/upstream") for _ in range(100)]
        try:
            # What each is sent first is bounded: the last 100 KiB of the models' lines (each
            # model's last 100 KiB, one after the other, were twice that).
            firsts = [llama_ui.events(resp) for resp in events]
            for frames in firsts:
                histories = [await anext(frames) for _ in range(2)]
                upstream = next(d for _, d in histories if d["source"] == "upstream")
                text = upstream["data"].encode()
                assert len(text) <= HISTORY and b"[b] b-history\n" in text
            for resp in streams:
                text = b""
                while b"[b] b-history\n" not in text:
                    text += await asyncio.wait_for(resp.content.read(1 << 16), 30)
                assert len(text) <= HISTORY

            # 200 readers, and the proxy still looks at two files, once each a look.
            first = _counters(stack)["logs"]
            await asyncio.to_thread(
                wait_for,
                lambda: _counters(stack)["logs"]["looks"] >= first["looks"] + 5,
                15,
                what="five looks",
            )
            later = _counters(stack)["logs"]
            assert later["followed"] == 2
            assert later["stats"] - first["stats"] == 2 * (later["looks"] - first["looks"])

            # A line a model writes now reaches every reader, once.
            stack.get_ok("/upstream/b/output?bytes=1&end=for-everyone")
            for frames in firsts:
                async with asyncio.timeout(30):
                    async for kind, data in frames:
                        if kind == "logData" and "for-everyone" in data["data"]:
                            assert data["data"].count("[b] for-everyone\n") == 1
                            break
            for resp in streams:
                text = b""
                while b"for-everyone" not in text:
                    text += await asyncio.wait_for(resp.content.read(1 << 16), 30)
                assert text.count(b"[b] for-everyone\n") == 1
        finally:
            for resp in [*events, *streams]:
                resp.close()
