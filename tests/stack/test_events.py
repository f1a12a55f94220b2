"""`GET /api/events` against the real stack: llama-swap's frames, the snapshot first, a swap's
state changes in order, activity and in-flight events; and a subscriber that never reads does
not delay requests (it loses events instead, and is told how many)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from tests.support import llama_ui
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.processes

CHAT = "/v1/chat/completions"


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    a, b = model_ports(2)
    return stack_factory(
        {
            "healthCheckTimeout": 15,
            "models": {"a": local_model("a", a), "b": local_model("b", b)},
        }
    )


async def test_snapshot_swap_states_activity_inflight(stack: Stack) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(stack.url + "/api/events") as resp,
    ):
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream"
        assert resp.headers["X-Accel-Buffering"] == "no"
        stream = llama_ui.events(resp)
        first = [await anext(stream) for _ in range(6)]
        assert [kind for kind, _ in first] == [
            "logData",
            "logData",
            "modelStatus",
            "uiConfig",
            "profileChanged",
            "inflight",
        ]
        assert {d["source"] for _, d in first[:2]} == {"proxy", "upstream"}
        status = first[2][1]
        assert [(m["id"], m["state"]) for m in status] == [("a", "stopped"), ("b", "stopped")]
        assert first[3][1] == {"activity": {"session_id": ["X-Session-ID", "X-Litellm-Session-Id"]}}
        assert first[5][1] == {"operation": "snapshot", "requests": []}

        async def chat(model: str, **extra: Any) -> None:
            body = {"model": model, "messages": [], **extra}
            async with session.post(stack.url + CHAT, json=body) as r:
                assert r.status == 200
                await r.read()

        await chat("a")
        # b is slow enough to be seen in flight (it waits 1 s before answering).
        slow = asyncio.ensure_future(chat("b", x_delay=1.0))
        # llama-swap's states, and swapd's own beside them.
        states: dict[str, list[str]] = {"a": ["stopped"], "b": ["stopped"]}
        own: dict[str, list[str]] = {"a": ["stopped"], "b": ["stopped"]}
        activity: list[dict[str, Any]] = []
        inflight: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while len(activity) < 2 and time.monotonic() < deadline:
            kind, data = await asyncio.wait_for(anext(stream), 30)
            if kind == "modelStatus":
                for m in data:
                    if states[m["id"]][-1] != m["state"]:
                        states[m["id"]].append(m["state"])
                    if own[m["id"]][-1] != m["swapd_state"]:
                        own[m["id"]].append(m["swapd_state"])
            elif kind == "activity":
                activity.append(data)
            elif kind == "inflight":
                inflight.append(data)
        await slow

    # a started, then the swap to b drained and stopped it, and b started; a drain is
    # llama-swap's `stopping`.
    assert own["a"] == ["stopped", "starting", "ready", "draining", "stopping", "stopped"]
    assert states["a"] == ["stopped", "starting", "ready", "stopping", "stopped"]
    assert own["b"] == states["b"] == ["stopped", "starting", "ready"]
    # llama-swap's activity event, the id alone; the record is the activity API's.
    assert all(set(a) == {"id"} for a in activity), activity
    assert activity[0]["id"] + 1 == activity[1]["id"]
    records = {r["id"]: r for r in _activity(stack, min_id=activity[0]["id"])}
    announced = [records[a["id"]] for a in activity]
    assert [(r["model"], r["resp_status_code"]) for r in announced] == [("a", 200), ("b", 200)]
    assert announced[1]["tokens"]["output_tokens"] == 3
    ops = [(i["operation"], i.get("request", {}).get("model")) for i in inflight]
    assert ("upsert", "b") in ops
    upserted = next(i["request"]["id"] for i in inflight if i["operation"] == "upsert")
    assert {"operation": "remove", "id": upserted} in inflight


def _activity(stack: Stack, **query: Any) -> list[dict[str, Any]]:
    url = stack.url + "/api/metrics/activity?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=5) as resp:
        return list(json.load(resp)["data"])


@pytest.fixture
def small_queue_stack(stack_factory: Callable[..., Stack]) -> Stack:
    (a,) = model_ports(1)
    return stack_factory(
        {"healthCheckTimeout": 15, "models": {"a": local_model("a", a)}},
        env={"SWAPD_CLIENT_BUFFER_BYTES": "16384"},
    )


async def test_activity_events_follow_the_clients(stack: Stack) -> None:
    """The daemon hears of a proxy's events clients as they come and go (`watching` in
    `/api/status`) and announces new records while there is one; a client that comes after
    every other one has left gets them again."""

    def watching() -> dict[str, int]:
        return dict(stack.status()["watching"])

    assert watching() == {}
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            async with session.get(stack.url + "/api/events") as resp:
                stream = llama_ui.events(resp)
                told = lambda: list(watching().values()) == [1]  # noqa: E731
                await asyncio.to_thread(wait_for, told, 10, what="the daemon told")
                body = {"model": "a", "messages": []}
                async with session.post(stack.url + CHAT, json=body) as r:
                    assert r.status == 200
                    await r.read()
                kind, data = "", None
                while kind != "activity":
                    kind, data = await asyncio.wait_for(anext(stream), 30)
                assert data is not None
                (record,) = _activity(stack, min_id=data["id"], max_id=data["id"])
                assert record["model"] == "a"
            # In a thread: this loop must run for the client's connection to close.
            left = lambda: watching() == {}  # noqa: E731
            await asyncio.to_thread(wait_for, left, 10, what="the daemon told the client left")


def _proxy_events(stack: Stack) -> dict[str, int]:
    with urllib.request.urlopen(stack.url + "/running", timeout=5) as resp:
        return dict(json.load(resp)["proxy"]["events"])


def test_a_stalled_subscriber_loses_events_never_slows_requests(small_queue_stack: Stack) -> None:
    stack = small_queue_stack
    # A subscriber that stops reading: once the proxy's socket and transport buffers are full
    # (a few MiB on loopback) and then its 16 KiB backlog, events are lost.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", stack.port))
    sock.sendall(b"GET /api/events HTTP/1.1\r\nHost: swapd\r\n\r\n")
    try:
        wait_for(lambda: _proxy_events(stack)["subscribers"] == 1, 10, what="the subscriber")
        # The model prints its long tag: each request makes an upstream `logData` event of some
        # 6 KiB, which fill the buffers; a chat after each makes an `activity` event (ids alone,
        # too small to fill them soon; a GET to `/upstream/` is in no activity log, as in
        # llama-swap's), which is lost once they are full.
        path = "/upstream/a/slow?n=0&delay=0&tag=" + "p" * 6000
        chat = json.dumps({"model": "a", "messages": []}).encode()
        lost = 0
        for i in range(1000):
            with urllib.request.urlopen(stack.url + path, timeout=10) as resp:
                assert resp.status == 200 and resp.read() == b""  # n=0: no chunks
            post = urllib.request.Request(
                stack.url + CHAT, data=chat, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(post, timeout=10) as resp:
                assert resp.status == 200
            if i % 10 == 9:
                lost = _proxy_events(stack)["lost"]
                if lost:
                    break
        # Requests went on being answered while the subscriber read nothing: it lost events.
        assert lost, _proxy_events(stack)
        # Reading again, it is told how many it lost. The backlog (the socket buffers) comes a
        # few KiB a read through the small receive buffer: it is read as fast as it comes, and
        # only when nothing more comes is a new event asked for, which flushes the
        # subscriber's queue with the notice first.
        sock.settimeout(0.5)
        received = b""
        told = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not told:
            try:
                received += sock.recv(1 << 20)
            except TimeoutError:
                urllib.request.urlopen(stack.url + "/running", timeout=5).read()
                continue
            if b"eventsDropped" not in received:
                continue
            for raw in received.split(b"\n\n")[:-1]:  # whole frames only
                if b"eventsDropped" in raw:
                    envelope = json.loads(raw.split(b"data:", 1)[1])
                    told += json.loads(envelope["data"])["count"]
        assert told > 0
    finally:
        sock.close()
    wait_for(lambda: _proxy_events(stack)["subscribers"] == 0, 10, what="subscriber gone")


async def test_profile_changes_are_pushed(stack_factory: Callable[..., Stack]) -> None:
    """`profileChanged` carries the daemon's active profile on connecting, then comes again,
    before the `modelStatus` of the change, whenever anyone switches it (through either of two
    proxy processes), as llama-swap sends it."""
    (a,) = model_ports(1)
    stack = stack_factory(
        {"models": {"a": local_model("a", a)}, "profiles": {"p": {"pins": {"a": ""}}}},
        proxy_processes=2,
    )
    async with aiohttp.ClientSession() as session:
        async with session.put(stack.url + "/api/profiles/active", json={"name": "p"}) as r:
            assert r.status == 200
        async with session.get(stack.url + "/api/events") as resp:
            stream = llama_ui.events(resp)
            first = [await anext(stream) for _ in range(6)]
            assert ("profileChanged", {"active": "p"}) in first
            for name in (None, "p", None):
                async with session.put(
                    stack.url + "/api/profiles/active", json={"name": name}
                ) as r:
                    assert r.status == 200
                kinds: list[str] = []
                async with asyncio.timeout(10):
                    async for kind, data in stream:
                        kinds.append(kind)
                        if kind == "profileChanged":
                            assert data == {"active": name}
                        if kind == "modelStatus" and "profileChanged" in kinds:
                            break
                assert kinds.count("profileChanged") == 1
