"""The daemon's side of the IPC contract, spoken to directly (a DaemonClient and a SUB socket
playing the proxy): snapshot + ordered events, bad messages answered with errors and never a
crash, and the operator commands' output."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
import zmq
import zmq.asyncio

from swapd.ipc import codec
from swapd.ipc.client import DaemonClient
from swapd.ipc.endpoints import Endpoints
from swapd.ipc.messages import (
    Ensure,
    Error,
    Ready,
    Snapshot,
    SnapshotReply,
    StateChanged,
    Status,
    StatusReply,
)
from swapd.ipc.states import HEALTH_CHECK_REASON
from tests.support.daemon import chat, config
from tests.support.stack import fake_model_cmd, wait_for

pytestmark = pytest.mark.processes


async def test_snapshot_then_ordered_state_events(stack_factory) -> None:
    stack = stack_factory(config({"m:1": {"cmd": fake_model_cmd("m"), "aliases": ["em"]}}))
    endpoints = Endpoints(stack.run_dir)
    ctx = zmq.asyncio.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    monitor = sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    sub.connect(endpoints.events)
    client = DaemonClient(endpoints.daemon, context=ctx)
    try:
        # Connected: the subscription goes out first on the new connection, long before the
        # daemon publishes anything this test asks for.
        await asyncio.wait_for(monitor.recv_multipart(), 10)
        snap = await client.request(lambda i: Snapshot(id=i))
        assert isinstance(snap, SnapshotReply)
        assert [m.id for m in snap.table.models] == ["m:1"]
        assert snap.table.models[0].aliases == ("em",)
        assert snap.table.log_dir == str(stack.log_dir)
        assert [(m.model, m.state) for m in snap.models] == [("m:1", "stopped")]

        ready = await client.request(lambda i: Ensure(id=i, model="m:1"), timeout=30)
        assert isinstance(ready, Ready) and ready.upstream.startswith("http://127.0.0.1:")
        seen = []
        while len(seen) < 3:
            event = codec.decode_event(await asyncio.wait_for(sub.recv(), 5))
            if isinstance(event, StateChanged):
                seen.append(event)
        # `starting` again once the process runs: now waiting for its health check.
        assert [e.status.state for e in seen] == ["starting", "starting", "ready"]
        assert seen[1].status.reason == HEALTH_CHECK_REASON
        assert [e.seq for e in seen] == [snap.seq + 1, snap.seq + 2, snap.seq + 3]
        assert {e.instance for e in seen} == {snap.instance}
        assert seen[2].status.pid is not None
    finally:
        client.close()
        sub.disable_monitor()
        monitor.close(linger=0)
        sub.close(linger=0)
        ctx.term()


async def test_bad_messages_get_errors_and_the_daemon_lives_on(stack_factory) -> None:
    stack = stack_factory(config({"m": {"cmd": fake_model_cmd("m")}}))
    endpoints = Endpoints(stack.run_dir)
    ctx = zmq.asyncio.Context()
    raw = ctx.socket(zmq.DEALER)
    raw.connect(endpoints.daemon)
    try:
        # Unknown type with an id: an Error reply with that id.
        await raw.send(msgspec.msgpack.encode({"type": "Explode", "id": 41}))
        reply = codec.decode_reply(await asyncio.wait_for(raw.recv(), 5))
        assert isinstance(reply, Error) and reply.id == 41 and reply.status == 400
        # A known type with a wrong field: also an error.
        await raw.send(msgspec.msgpack.encode({"type": "Ensure", "id": 42, "model": 7}))
        reply = codec.decode_reply(await asyncio.wait_for(raw.recv(), 5))
        assert isinstance(reply, Error) and reply.id == 42
        # Garbage: no id to answer, but no crash either.
        await raw.send(b"\xc1not msgpack")
        await raw.send(codec.encode(Status(id=43)))
        reply = codec.decode_reply(await asyncio.wait_for(raw.recv(), 5))
        assert isinstance(reply, StatusReply) and reply.id == 43
        assert reply.received.get("invalid") == 3
    finally:
        raw.close(linger=0)
        ctx.term()
    assert "malformed message" in stack.output()


def test_status_table(stack_factory) -> None:
    stack = stack_factory(config({"m": {"cmd": fake_model_cmd("m"), "ttl": 300}}))
    stack.swapd("unload")  # nothing loaded: fine
    before = stack.swapd("status").stdout
    assert "MODEL" in before and "TTL LEFT" in before and "stopped" in before

    chat(stack.url, "m")

    def idle_row() -> str | None:
        table = stack.swapd("status").stdout
        row = next(line for line in table.splitlines() if line.startswith("m "))
        # The proxy reports the busy -> idle edge 50 ms after it; until then the model is in use.
        return row if "in flight" not in row else None

    row = wait_for(idle_row, timeout=5, what="the request to be reported finished")
    assert "ready" in row and str(stack.model("m")["pid"]) in row
    ttl_left = row.split()[-1]
    assert ttl_left in ("5m00s", "4m59s", "4m58s"), row
