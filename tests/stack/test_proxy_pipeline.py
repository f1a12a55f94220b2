"""The proxy's request pipeline (proxy/pipeline.py) against the real stack: requests to a ready
model go out with no IPC, requests of every framing are served on one kept-alive connection, and
the relay passes on what upstreams send, including upstreams that misbehave.

How a request was served is read from the proxy's counters (`/running`'s `"proxy"`, stats.py):
`served_without_ipc` (a ready model, no round trip to the daemon), `waited_for_start` (it sent
`Ensure` and waited), `outside_admission`, `websockets`, `refused`. The stack runs one proxy
process, so its counters see every request.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import urllib.request
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import aiohttp
import pytest

from tests.support.proxy import (
    RawConnection,
    RawResponse,
    in_flight,
    local_model,
    model_log_has,
    model_ports,
    post_json,
)
from tests.support.stack import Stack, free_port, free_ports, wait_for

pytestmark = pytest.mark.processes

CHAT = "/v1/chat/completions"


@dataclass
class Ports:
    scripted: int
    dead: int


@pytest.fixture(scope="module")
def ports() -> Ports:
    scripted, dead = free_ports(2)
    return Ports(scripted, dead)


@pytest.fixture(scope="module")
def stack(ports: Ports) -> Iterator[Stack]:
    alpha, victim, limited = model_ports(3)
    members = ["alpha", "victim", "lazy", "limited", "scripted", "dead"]
    config = {
        "healthCheckTimeout": 15,
        "models": {
            "alpha": local_model("alpha", alpha, aliases=["alpha-alias"]),
            "victim": local_model("victim", victim),
            "lazy": local_model("lazy", free_port()),
            "limited": local_model("limited", limited, concurrencyLimit=1),
            # `sleep` stands for the server process; the test's ScriptedUpstream answers on its
            # port, and `dead`'s port has nothing listening at all.
            "scripted": {
                "cmd": "sleep 1000000",
                "proxy": f"http://127.0.0.1:{ports.scripted}",
                "checkEndpoint": "none",
            },
            "dead": {
                "cmd": "sleep 1000000",
                "proxy": f"http://127.0.0.1:{ports.dead}",
                "checkEndpoint": "none",
            },
        },
        "groups": {"all": {"swap": False, "members": members}},
    }
    with Stack(config, env={"SWAPD_PROXY_LOG_LEVEL": "DEBUG"}) as running:
        yield running


@pytest.fixture
async def conn(stack: Stack) -> AsyncIterator[RawConnection]:
    connection = await RawConnection.open(stack.url)
    yield connection
    await connection.close()


def counters(stack: Stack) -> dict[str, int]:
    """The proxy's request counters (not the event hub's and log follower's, nested beside them,
    which move on their own)."""
    with urllib.request.urlopen(stack.url + "/running", timeout=5) as resp:
        return {k: v for k, v in json.load(resp)["proxy"].items() if isinstance(v, int)}


def since(stack: Stack, before: dict[str, int]) -> dict[str, int]:
    """How much each counter grew since `before` (only those that did)."""
    now = counters(stack)
    return {k: v - before.get(k, 0) for k, v in now.items() if k not in ("pid", "requests")
            and v != before.get(k, 0)}  # fmt: skip


def no_ipc(n: int) -> dict[str, int]:
    """What `n` requests to a ready local model add to the counters."""
    return {"forwarded": n, "served_without_ipc": n} if n else {}


async def _ready(stack: Stack, model: str) -> None:
    """Get `model` ready, on a connection of its own: the tests' connections then start with the
    proxy synced and the model ready."""
    conn = await RawConnection.open(stack.url)
    await conn.send(post_json(CHAT, {"model": model}))
    assert (await conn.response(30)).status == 200
    await conn.close()
    assert stack.model(model)["state"] == "ready"


# ------------------------------------------------------------------------------------------------
# a ready model: no IPC


async def test_requests_to_a_ready_model_make_no_ipc(stack: Stack, conn: RawConnection) -> None:
    await _ready(stack, "alpha")
    before = counters(stack)
    for i in range(20):
        await conn.send(post_json(CHAT, {"model": "alpha-alias", "n": i}))
        resp = await conn.response()
        assert resp.status == 200
        body = json.loads(resp.body)
        assert body["served_by"]["name"] == "alpha"
        assert body["request_body"] == {"model": "alpha-alias", "n": i}
        assert resp.header("Content-Length") == str(len(resp.body))
    assert since(stack, before) == no_ipc(20)

    # The same connection serves another route, then a model request again.
    before = counters(stack)
    await conn.send(b"GET /v1/models HTTP/1.1\r\nHost: swapd\r\n\r\n")
    listed = await conn.response()
    assert listed.status == 200
    assert "alpha" in {m["id"] for m in json.loads(listed.body)["data"]}
    await conn.send(post_json(CHAT, {"model": "alpha"}))
    assert (await conn.response()).status == 200
    assert since(stack, before) == no_ipc(1)


async def test_a_request_sent_in_pieces(stack: Stack, conn: RawConnection) -> None:
    await _ready(stack, "alpha")
    before = counters(stack)
    request = post_json(CHAT, {"model": "alpha", "pieces": True})
    for i in range(len(request)):
        await conn.send(request[i : i + 1])
    resp = await conn.response()
    assert resp.status == 200
    assert json.loads(resp.body)["request_body"] == {"model": "alpha", "pieces": True}
    assert since(stack, before) == no_ipc(1)


async def test_a_request_sent_while_a_response_streams_waits_its_turn(
    stack: Stack, conn: RawConnection
) -> None:
    await _ready(stack, "alpha")
    before = counters(stack)
    stream = {"model": "alpha", "stream": True, "x_chunks": 4, "x_delay": 0.05}
    await conn.send(post_json(CHAT, stream))
    first = await conn.body_piece()
    assert first.startswith(b"data: ")  # the stream is under way
    await conn.send(post_json(CHAT, {"model": "alpha", "second": True}))
    streamed = await conn.response()
    assert streamed.chunked and streamed.body.endswith(b"data: [DONE]\n\n")
    assert streamed.body.count(b"tok") == 4
    second = await conn.response()
    assert json.loads(second.body)["request_body"]["second"] is True
    assert since(stack, before) == no_ipc(2)


async def test_connection_close_is_honoured(stack: Stack, conn: RawConnection) -> None:
    await _ready(stack, "alpha")
    await conn.send(post_json(CHAT, {"model": "alpha"}, "Connection: close"))
    resp = await conn.response()
    assert resp.status == 200
    assert resp.header("Connection") == "close"
    assert await conn.closed_by_server(10)


async def test_a_stream_arrives_as_it_is_produced(stack: Stack, conn: RawConnection) -> None:
    await _ready(stack, "alpha")
    before = counters(stack)
    body = {"model": "alpha", "stream": True, "x_chunks": 3, "x_delay": 0.3}
    await conn.send(post_json(CHAT, body))
    first = await conn.body_piece()
    # The first event is here while the model is still producing the rest (0.9 s in all).
    assert b"tok0" in first and b"[DONE]" not in first
    resp = await conn.response()
    assert resp.header("Content-Type") == "text/event-stream"
    assert resp.header("X-Accel-Buffering") == "no"
    assert resp.chunked and resp.body.endswith(b"data: [DONE]\n\n")
    assert since(stack, before) == no_ipc(1)


async def test_a_get_through_upstream_to_a_ready_model_makes_no_ipc(
    stack: Stack, conn: RawConnection
) -> None:
    await _ready(stack, "alpha")
    before = counters(stack)
    await conn.send(b"GET /upstream/alpha/sse?n=50&size=8 HTTP/1.1\r\nHost: swapd\r\n\r\n")
    resp = await conn.response()
    assert resp.status == 200 and resp.chunked
    assert resp.header("X-Accel-Buffering") == "no"
    assert resp.body.count(b"data: xxxxxxxx\n\n") == 50 and resp.body.endswith(b"[DONE]\n\n")
    await conn.send(b"GET /upstream/alpha/a%2Fb/c?x=%20 HTTP/1.1\r\nHost: swapd\r\n\r\n")
    echoed = json.loads((await conn.response()).body)
    assert (echoed["method"], echoed["raw_path"]) == ("GET", "/a%2Fb/c?x=%20")
    assert since(stack, before) == no_ipc(2)


@pytest.mark.parametrize(
    ("path", "status", "counted"),
    [
        ("/upstream/alpha", 301, {}),
        ("/upstream/nosuch/x", 404, {"refused": 1}),
        ("/upstream/alpha/static/app.js", 200, {"outside_admission": 1}),
    ],
)
async def test_other_gets_through_upstream(
    stack: Stack, conn: RawConnection, path: str, status: int, counted: dict[str, int]
) -> None:
    await _ready(stack, "alpha")
    before = counters(stack)
    await conn.send(f"GET {path} HTTP/1.1\r\nHost: swapd\r\n\r\n".encode())
    assert (await conn.response()).status == status
    assert since(stack, before) == counted


async def test_a_large_body_of_known_length_streams_through(
    stack: Stack, conn: RawConnection
) -> None:
    await _ready(stack, "alpha")
    size = 3 * 1024 * 1024 + 17
    await conn.send(post_json(CHAT, {"model": "alpha", "x_blob": size}))
    resp = await conn.response(30)
    assert resp.status == 200
    assert not resp.chunked and resp.header("Content-Length") == str(size)
    assert resp.body == (bytes(range(256)) * (size // 256 + 1))[:size]


# ------------------------------------------------------------------------------------------------
# every framing, on one kept-alive connection


def chunked_post(path: str, body: bytes) -> bytes:
    """A POST whose JSON body is chunked."""
    head = f"POST {path} HTTP/1.1\r\nHost: swapd\r\nContent-Type: application/json\r\n"
    return head.encode() + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        len(body),
        body,
    )


def raw_post(path: str, body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: swapd\r\nContent-Type: application/json\r\n"
    return head.encode() + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


FRAMINGS = [
    pytest.param(
        chunked_post(CHAT, b'{"model":"alpha"}'), 200, "hello from alpha", 1,
        id="chunked-body",
    ),
    pytest.param(
        post_json(CHAT, {"model": "alpha"}, "Expect: 100-continue"), 200, "hello from alpha", 1,
        id="expect-continue",
    ),
    pytest.param(
        post_json(CHAT, {"model": "alpha"}, version="1.0"), 200, "hello from alpha", 1,
        id="http-1.0",
    ),
    pytest.param(
        b"POST /v1/chat/completions?model=alpha HTTP/1.1\r\nHost: swapd\r\n"
        b"Content-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi",
        200, "hello from alpha", 1,
        id="query-model",
    ),
    pytest.param(
        post_json("/upstream/alpha/v1/chat/completions", {"model": "alpha"}), 200,
        "hello from alpha", 1,
        id="upstream-route",
    ),
    pytest.param(
        post_json(CHAT, {"model": "alpha"}) + post_json(CHAT, {"model": "alpha"}), 200,
        "hello from alpha", 2,
        id="pipelined-in-one-write",
    ),
    pytest.param(
        post_json(CHAT, {"model": "alpha", "pad": "x" * (1024 * 1024)}), 200, "hello from alpha", 1,
        id="body-over-1-MiB",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("request_bytes", "status", "text", "served"), FRAMINGS)
async def test_every_framing_is_served_on_one_connection(
    stack: Stack,
    conn: RawConnection,
    request_bytes: bytes,
    status: int,
    text: str,
    served: int,
) -> None:
    await _ready(stack, "alpha")
    before = counters(stack)
    await conn.send(request_bytes)
    resp = await conn.response(30)
    assert resp.status == status
    assert text in resp.body.decode()
    if served == 2:
        assert (await conn.response()).status == 200  # the second of the two
    if b" HTTP/1.0\r\n" in request_bytes:
        assert await conn.closed_by_server(10)  # no keep-alive asked for
        assert since(stack, before) == no_ipc(served)
        return
    # The connection stays usable.
    await conn.send(post_json(CHAT, {"model": "alpha"}))
    assert (await conn.response()).status == 200
    assert since(stack, before) == no_ipc(served + 1)


async def test_connection_close_on_another_route_is_honoured(
    stack: Stack, conn: RawConnection
) -> None:
    await _ready(stack, "alpha")
    await conn.send(b"GET /v1/models HTTP/1.1\r\nHost: swapd\r\nConnection: close\r\n\r\n")
    resp = await conn.response()
    assert resp.status == 200 and resp.header("Connection") == "close"
    assert await conn.closed_by_server(10)


async def test_a_websocket_is_relayed(stack: Stack) -> None:
    await _ready(stack, "alpha")
    before = counters(stack)
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(stack.url + "/upstream/alpha/ws") as ws:
            assert json.loads((await ws.receive(timeout=10)).data)["hello"] == "alpha"
            await ws.send_str("ping")
            assert (await ws.receive(timeout=10)).data == "echo:ping"
    assert since(stack, before) == {"websockets": 1, **no_ipc(1)}


async def test_a_model_that_is_not_ready_waits_for_its_start_then_needs_no_ipc(
    stack: Stack, conn: RawConnection, session: aiohttp.ClientSession
) -> None:
    async with session.post(stack.url + "/api/models/unload/lazy") as resp:
        assert resp.status == 200
    await _ready(stack, "alpha")
    before = counters(stack)
    await conn.send(post_json(CHAT, {"model": "lazy"}))
    resp = await conn.response(30)
    assert resp.status == 200
    assert json.loads(resp.body)["served_by"]["name"] == "lazy"
    assert since(stack, before) == {"forwarded": 1, "waited_for_start": 1}
    await conn.send(post_json(CHAT, {"model": "lazy"}))
    assert (await conn.response()).status == 200
    assert since(stack, before) == {"forwarded": 2, "waited_for_start": 1, "served_without_ipc": 1}


# ------------------------------------------------------------------------------------------------
# a fixed-length and a chunked body answer alike


def _comparable(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted((k.lower(), v) for k, v in headers if k.lower() not in ("date", "content-length"))


async def _both_ways(stack: Stack, body: bytes) -> tuple[RawResponse, RawResponse]:
    """The same request with a body of fixed length and chunked, each on a fresh connection."""
    answers = []
    for request in (raw_post(CHAT, body), chunked_post(CHAT, body)):
        conn = await RawConnection.open(stack.url)
        await conn.send(request)
        answers.append(await conn.response(30))
        await conn.close()
    return answers[0], answers[1]


def _alike(fixed: RawResponse, chunked: RawResponse) -> None:
    assert fixed.status == chunked.status
    assert _comparable(fixed.headers) == _comparable(chunked.headers)
    assert fixed.chunked == chunked.chunked


async def test_both_framings_stream_alike(stack: Stack) -> None:
    await _ready(stack, "alpha")
    fixed, chunked = await _both_ways(stack, b'{"model":"alpha","stream":true,"x_chunks":2}')
    _alike(fixed, chunked)
    assert fixed.status == 200 and fixed.chunked
    assert fixed.body.count(b"tok") == chunked.body.count(b"tok") == 2


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        pytest.param(b'{"model":"nosuch"}', 404, "model nosuch not found", id="unknown-model"),
        pytest.param(b'{"messages":[]}', 400, "no model id", id="no-model"),
        pytest.param(b'{"model":', 400, "malformed JSON body", id="malformed-json"),
        pytest.param(b"[1,2]", 400, "must be an object", id="not-an-object"),
        pytest.param(b'{"model":5}', 400, '"model" must be a string', id="model-not-a-string"),
    ],
)
async def test_both_framings_answer_errors_alike(
    stack: Stack, body: bytes, status: int, text: str
) -> None:
    await _ready(stack, "alpha")
    fixed, chunked = await _both_ways(stack, body)
    _alike(fixed, chunked)
    assert fixed.status == status
    assert fixed.body == chunked.body
    assert text in json.loads(fixed.body)["error"]["message"]


async def test_both_framings_answer_an_unreachable_upstream_alike(stack: Stack) -> None:
    await _ready_dead(stack)
    fixed, chunked = await _both_ways(stack, b'{"model":"dead"}')
    _alike(fixed, chunked)
    assert fixed.status == 502
    assert fixed.body == chunked.body
    message = json.loads(fixed.body)["error"]["message"]
    assert message.startswith("upstream dead is not reachable: ")


async def test_both_framings_answer_the_concurrency_limit_alike(stack: Stack) -> None:
    await _ready(stack, "limited")
    busy = await RawConnection.open(stack.url)
    slow = {"model": "limited", "stream": True, "x_chunks": 100, "x_delay": 0.05}
    await busy.send(post_json(CHAT, slow))
    assert b"tok0" in await busy.body_piece()  # its one slot is taken
    fixed, chunked = await _both_ways(stack, b'{"model":"limited"}')
    await busy.close()
    _alike(fixed, chunked)
    assert fixed.status == 429
    assert fixed.header("Retry-After") == "1"
    assert fixed.body == chunked.body
    wait_for(lambda: in_flight(stack, "limited") == 0, 10, what="limited idle")


async def _ready_dead(stack: Stack) -> None:
    """Get `dead` started: its `sleep` process runs, and nothing listens on its port."""
    conn = await RawConnection.open(stack.url)
    await conn.send(post_json(CHAT, {"model": "dead"}))
    assert (await conn.response(30)).status == 502
    await conn.close()
    assert stack.model("dead")["state"] == "ready"


# ------------------------------------------------------------------------------------------------
# clients and upstreams that go away


async def test_a_client_that_leaves_cancels_the_upstream_request(stack: Stack) -> None:
    conn = await RawConnection.open(stack.url)
    await _ready(stack, "alpha")
    body = {"model": "alpha", "stream": True, "x_chunks": 100, "x_delay": 0.05, "x_tag": "left"}
    await conn.send(post_json(CHAT, body))
    assert b"tok0" in await conn.body_piece()
    await conn.close()
    log = model_log_has(stack, "alpha", "chat left: client gone after")
    assert "tok99" not in log
    wait_for(lambda: in_flight(stack, "alpha") == 0, 10, what="alpha idle")


async def test_an_upstream_killed_mid_stream_ends_the_response(
    stack: Stack, conn: RawConnection
) -> None:
    await _ready(stack, "victim")
    body = {"model": "victim", "stream": True, "x_chunks": 200, "x_delay": 0.05}
    await conn.send(post_json(CHAT, body))
    assert b"tok0" in await conn.body_piece()
    os.kill(stack.model("victim")["pid"], signal.SIGKILL)
    resp = await conn.response(10)  # a chunked stream ends cleanly; never hangs
    assert resp.status == 200 and resp.chunked
    assert b"[DONE]" not in resp.body
    wait_for(lambda: stack.model("victim")["state"] != "ready", 10, what="victim seen dead")
    await conn.send(post_json(CHAT, {"model": "victim"}))  # same connection, fresh victim
    assert (await conn.response(30)).status == 200
    wait_for(lambda: in_flight(stack, "victim") == 0, 10, what="victim idle")


def _refuses(port: int) -> bool:
    assert port > 0
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


async def test_a_request_sent_before_the_proxy_hears_of_a_crash_waits_for_the_restart(
    stack: Stack, conn: RawConnection
) -> None:
    """A model dies and the proxy, not told yet, sends it a request: the connection is refused
    before a byte goes out, so the request waits for the daemon's word, then for the restart,
    and is answered. The daemon is held (SIGSTOP) meanwhile, so the proxy cannot have heard."""
    await _ready(stack, "victim")
    old = stack.model("victim")
    port = int(old["upstream"].rsplit(":", 1)[1])  # its config's `proxy:` (no ${PORT} here)
    daemon = stack.status()["pid"]
    before = counters(stack)
    os.kill(daemon, signal.SIGSTOP)
    try:
        os.kill(old["pid"], signal.SIGKILL)
        wait_for(lambda: _refuses(port), 10, what="the dead model's port closed")
        await conn.send(post_json(CHAT, {"model": "victim"}))
        # /running asks the daemon, which is held: each poll waits out its 1 s.
        wait_for(lambda: since(stack, before).get("refused_ready") == 1, 15, what="refused")
    finally:
        os.kill(daemon, signal.SIGCONT)
    resp = await conn.response(30)
    assert resp.status == 200, resp.body
    assert stack.model("victim")["pid"] not in (None, old["pid"])
    grew = since(stack, before)
    assert grew["refused_ready"] == 1 and grew["waited_for_start"] == 1, grew


# ------------------------------------------------------------------------------------------------
# upstreams that misbehave


class ScriptedUpstream:
    """An HTTP upstream on a loopback port whose answers each test writes byte for byte. It stands
    for an inference server that drops kept-alive connections or breaks off its answers. An
    answer of None closes the connection without answering; `close_after` closes it after. An
    answer of an int n is a body of n bytes written piece by piece, each piece waiting until the
    socket takes it (`sent` counts them)."""

    OK = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"
        b'{"ok":true}'
    )

    def __init__(self, port: int) -> None:
        self.port = port
        self.script: deque[tuple[bytes | int | None, bool]] = deque()
        self.requests = 0
        self.sent = 0
        self.all_sent = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def answer(self, data: bytes | int | None, *, close_after: bool = False) -> None:
        self.script.append((data, close_after))

    async def __aenter__(self) -> ScriptedUpstream:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", self.port, reuse_address=True
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                self.requests += 1
                data, close_after = self.script.popleft() if self.script else (self.OK, False)
                if data is None:
                    break
                if isinstance(data, int):
                    await self._stream(writer, data)
                else:
                    writer.write(data)
                    await writer.drain()
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        self._writers.discard(writer)
        writer.close()

    async def _stream(self, writer: asyncio.StreamWriter, size: int) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        piece = b"x" * 65536
        while self.sent < size:
            part = piece[: size - self.sent]
            writer.write(part)
            await writer.drain()
            self.sent += len(part)
        self.all_sent.set()


@pytest.fixture
async def scripted(stack: Stack, ports: Ports) -> AsyncIterator[ScriptedUpstream]:
    async with ScriptedUpstream(ports.scripted) as upstream:
        # Started once per module by the daemon (its `sleep`); the first request may start it.
        conn = await RawConnection.open(stack.url)
        await conn.send(post_json(CHAT, {"model": "scripted"}))
        assert (await conn.response(30)).status == 200
        await conn.close()
        upstream.requests = 0
        yield upstream


async def test_a_dropped_keep_alive_connection_is_retried(
    stack: Stack, conn: RawConnection, scripted: ScriptedUpstream
) -> None:
    before = counters(stack)
    scripted.answer(ScriptedUpstream.OK)  # the first request leaves its connection pooled
    scripted.answer(None)  # then the upstream drops it as the next request arrives
    get = b"GET /upstream/scripted/x HTTP/1.1\r\nHost: swapd\r\n\r\n"
    for _ in range(2):
        await conn.send(get)
        resp = await conn.response()
        assert resp.status == 200 and resp.body == b'{"ok":true}'
    assert scripted.requests == 3  # the second request, sent again on a fresh connection
    assert since(stack, before) == no_ipc(2)


async def test_a_post_the_upstream_may_have_read_is_not_sent_twice(
    stack: Stack, conn: RawConnection, scripted: ScriptedUpstream
) -> None:
    """As in Go's and nginx's proxies: a POST on a kept-alive connection that the upstream drops
    after reading it may have been acted on, so it is not sent again (a 502 says so)."""
    scripted.answer(ScriptedUpstream.OK)
    scripted.answer(None)
    for status in (200, 502):
        await conn.send(post_json(CHAT, {"model": "scripted"}))
        assert (await conn.response()).status == status
    assert scripted.requests == 2


async def test_a_slow_client_holds_the_upstream_back(
    stack: Stack, conn: RawConnection, scripted: ScriptedUpstream
) -> None:
    size = 64 * 1024 * 1024
    scripted.answer(size)
    await conn.send(post_json(CHAT, {"model": "scripted"}))
    received = len(await conn.body_piece())  # the response has begun; the client stops reading
    # Unread, the response can fill the sockets' buffers and little more: the proxy stops
    # reading the upstream instead of holding the rest itself. Were it not, the upstream would
    # send all 64 MiB in well under a second. (The upstream runs on this test's event loop.)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(scripted.all_sent.wait(), 3)
    assert scripted.sent < size // 2
    while received < size:
        received += len(await conn.body_piece(30))
    assert received == size and scripted.sent == size


async def test_a_short_body_broken_off_is_a_502(
    stack: Stack, conn: RawConnection, scripted: ScriptedUpstream
) -> None:
    scripted.answer(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial", close_after=True)
    await conn.send(post_json(CHAT, {"model": "scripted"}))
    resp = await conn.response()
    assert resp.status == 502
    error = json.loads(resp.body)["error"]
    assert error["message"].startswith("upstream scripted failed mid-response")
    assert error["type"] == "server_error"
    await conn.send(post_json(CHAT, {"model": "scripted"}))  # the connection is still good
    assert (await conn.response()).status == 200


async def test_a_long_body_of_known_length_broken_off_closes_the_connection(
    stack: Stack, conn: RawConnection, scripted: ScriptedUpstream
) -> None:
    size = 1024 * 1024
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size
    scripted.answer(head + b"x" * (size // 2), close_after=True)
    await conn.send(post_json(CHAT, {"model": "scripted"}))
    # HTTP can only say "truncated" of a body of known length by closing short of it.
    with pytest.raises(ConnectionError):
        await conn.response()
    assert conn.eof


async def test_a_chunked_body_broken_off_ends_cleanly(
    stack: Stack, conn: RawConnection, scripted: ScriptedUpstream
) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n"
    scripted.answer(head + b"5\r\nhello\r\n", close_after=True)
    await conn.send(post_json(CHAT, {"model": "scripted"}))
    resp = await conn.response()
    assert resp.status == 200 and resp.chunked and resp.body == b"hello"
    await conn.send(post_json(CHAT, {"model": "scripted"}))
    assert (await conn.response()).status == 200


async def test_an_ollama_chat_broken_off_mid_stream_ends_with_an_error_line(
    stack: Stack, conn: RawConnection, scripted: ScriptedUpstream
) -> None:
    """A model that died mid-stream under Ollama's `/api/chat` gave a 200 with an empty body:
    as Ollama, the stream ends with an `{"error": ...}` line (issue 40, item 10)."""
    head = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
    )
    event = b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
    scripted.answer(head + b"%x\r\n%s\r\n" % (len(event), event), close_after=True)
    await conn.send(post_json("/api/chat", {"model": "scripted", "messages": [{"role": "user"}]}))
    resp = await conn.response()
    assert resp.status == 200, resp
    lines = [json.loads(line) for line in resp.body.splitlines()]
    assert lines[0]["message"]["content"] == "Hel" and not lines[0]["done"]
    assert lines[-1]["error"].startswith("upstream scripted broke off the response"), lines


@pytest.mark.parametrize(
    ("answer", "status", "body", "chunked"),
    [
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close", 200,
            b"until close", True, id="body-until-close",
        ),
        pytest.param(b"HTTP/1.1 204 No Content\r\n\r\n", 204, b"", False, id="no-content"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", 200, b"abc", False,
            id="no-content-type",
        ),
        pytest.param(
            b"HTTP/1.1 503 Busy\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
            503, b"{}", False, id="upstream-error-passed-through",
        ),
    ],
)  # fmt: skip
async def test_upstream_framings_are_relayed(
    stack: Stack,
    conn: RawConnection,
    scripted: ScriptedUpstream,
    answer: bytes,
    status: int,
    body: bytes,
    chunked: bool,
) -> None:
    scripted.answer(answer, close_after=True)
    await conn.send(post_json(CHAT, {"model": "scripted"}))
    resp = await conn.response()
    assert (resp.status, resp.body, resp.chunked) == (status, body, chunked)
    if status == 204:
        assert resp.header("Content-Length") is None and resp.header("Content-Type") is None
    elif b"Content-Type" not in answer:
        # What aiohttp's responses say of a body of unknown type.
        assert resp.header("Content-Type") == "application/octet-stream"
    await conn.send(post_json(CHAT, {"model": "scripted"}))
    assert (await conn.response()).status == 200


async def test_a_header_the_relay_adds_is_not_doubled(
    stack: Stack, conn: RawConnection, scripted: ScriptedUpstream
) -> None:
    """llama-server already says `X-Accel-Buffering: no` on its streams; the relay says it only
    for an SSE stream that does not."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    scripted.answer(head + b"X-Accel-Buffering: no\r\n\r\ndata: 1\n\n", close_after=True)
    await conn.send(post_json(CHAT, {"model": "scripted"}))
    resp = await conn.response()
    assert resp.body == b"data: 1\n\n"
    assert [k.lower() for k, _ in resp.headers].count("x-accel-buffering") == 1


# ------------------------------------------------------------------------------------------------
# idle connections


async def test_idle_connections_are_closed_after_the_keepalive_timeout(
    stack_factory: Callable[..., Stack],
) -> None:
    port = free_port()
    running = stack_factory(
        {"models": {"alpha": local_model("alpha", port)}},
        env={"SWAPD_PROXY_KEEPALIVE_S": "1"},
    )
    await _ready(running, "alpha")
    hot = await RawConnection.open(running.url)
    await hot.send(post_json(CHAT, {"model": "alpha"}))
    assert (await hot.response()).status == 200
    declined = await RawConnection.open(running.url)
    await declined.send(b"GET /v1/models HTTP/1.1\r\nHost: swapd\r\n\r\n")
    assert (await declined.response()).status == 200
    # Both connections are closed once idle for 1 s (allow for a loaded machine).
    assert await hot.closed_by_server(10)
    assert await declined.closed_by_server(10)
