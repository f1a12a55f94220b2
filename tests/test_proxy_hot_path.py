"""The proxy's hot path (proxy/hot_path.py) against the real stack: which requests it serves, that
everything else reaches aiohttp on the same connection intact and the connection comes back, and
how it relays what upstreams send, including upstreams that misbehave.

The proxy runs at DEBUG, where it logs each time it lends a connection to aiohttp (with the
reason), gets it back, or leaves it there: that is how a test tells which path served a request.
A loan is logged before the request it carries is answered, its end right after the answer, and
log lines keep their order, so `events_since` waits for a sentinel request of its own and returns
exactly the events logged before it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import aiohttp
import pytest

from tests.proxy_helpers import (
    RawConnection,
    RawResponse,
    in_flight,
    local_model,
    model_log_has,
    model_ports,
    post_json,
)
from tests.stack import Stack, free_port, free_ports, wait_for

pytestmark = pytest.mark.processes

EVENT = re.compile(
    r"hot path: connection (?:(lent|handed) to aiohttp \((.*)\): (.*)|(back) from aiohttp"
    r"|(left) to aiohttp)$"
)
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


def _events(stack: Stack) -> list[tuple[str, str]]:
    """("lent: <reason>" | "handed: <reason>" | "back" | "left", path) for each event logged."""
    found = []
    for line in stack.output().splitlines():
        match = EVENT.search(line)
        if match:
            kind, reason, path, back, left = match.groups()
            found.append((f"{kind}: {reason}" if kind else back or left, path or ""))
    return found


def mark(stack: Stack) -> int:
    return len(_events(stack))


async def events_since(stack: Stack, before: int) -> list[str]:
    """The events logged after the first `before` ones (up to a sentinel request's loan)."""
    sentinel_path = f"/health/sentinel-{uuid.uuid4().hex}"
    sentinel = await RawConnection.open(stack.url)
    await sentinel.send(f"GET {sentinel_path} HTTP/1.1\r\nHost: swapd\r\n\r\n".encode())
    assert (await sentinel.response()).status == 404
    await sentinel.close()

    def sentinel_done() -> tuple[list[tuple[str, str]], int] | None:
        found = _events(stack)
        at = [i for i, (_, path) in enumerate(found) if path == sentinel_path]
        # Its loan and the end of it: later marks start after both.
        if at and ("back", "") in found[at[-1] :]:
            return found, at[-1]
        return None

    logged, ends = wait_for(sentinel_done, 10, what="the sentinel request in the proxy's log")
    return [event for event, _ in logged[before:ends]]


async def _ready(stack: Stack, model: str) -> None:
    """Get `model` ready, on a connection of its own: the tests' connections then start with the
    proxy synced and the model ready, so each of their requests is the hot path's to decide."""
    conn = await RawConnection.open(stack.url)
    await conn.send(post_json(CHAT, {"model": model}))
    assert (await conn.response(30)).status == 200
    await conn.close()
    assert stack.model(model)["state"] == "ready"


# ------------------------------------------------------------------------------------------------
# what the hot path serves


async def test_requests_to_a_ready_model_stay_on_the_hot_path(
    stack: Stack, conn: RawConnection
) -> None:
    await _ready(stack, "alpha")
    before = mark(stack)
    for i in range(20):
        await conn.send(post_json(CHAT, {"model": "alpha-alias", "n": i}))
        resp = await conn.response()
        assert resp.status == 200
        body = json.loads(resp.body)
        assert body["served_by"]["name"] == "alpha"
        assert body["request_body"] == {"model": "alpha-alias", "n": i}
        assert resp.header("Content-Length") == str(len(resp.body))
    assert await events_since(stack, before) == []

    # The same connection then goes to aiohttp for a request the hot path does not serve, and
    # stays usable for the hot kind too.
    before = mark(stack)
    await conn.send(b"GET /v1/models HTTP/1.1\r\nHost: swapd\r\n\r\n")
    listed = await conn.response()
    assert listed.status == 200
    assert "alpha" in {m["id"] for m in json.loads(listed.body)["data"]}
    await conn.send(post_json(CHAT, {"model": "alpha"}))
    assert (await conn.response()).status == 200
    assert await events_since(stack, before) == ["lent: not a route of the hot path", "back"]


async def test_a_request_sent_in_pieces(stack: Stack, conn: RawConnection) -> None:
    await _ready(stack, "alpha")
    before = mark(stack)
    request = post_json(CHAT, {"model": "alpha", "pieces": True})
    for i in range(len(request)):
        await conn.send(request[i : i + 1])
    resp = await conn.response()
    assert resp.status == 200
    assert json.loads(resp.body)["request_body"] == {"model": "alpha", "pieces": True}
    assert await events_since(stack, before) == []


async def test_a_request_sent_while_a_response_streams_waits_its_turn(
    stack: Stack, conn: RawConnection
) -> None:
    await _ready(stack, "alpha")
    before = mark(stack)
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
    assert await events_since(stack, before) == []


async def test_connection_close_is_honoured(stack: Stack, conn: RawConnection) -> None:
    await _ready(stack, "alpha")
    await conn.send(post_json(CHAT, {"model": "alpha"}, "Connection: close"))
    resp = await conn.response()
    assert resp.status == 200
    assert resp.header("Connection") == "close"
    assert await conn.closed_by_server(10)


async def test_a_stream_arrives_as_it_is_produced(stack: Stack, conn: RawConnection) -> None:
    await _ready(stack, "alpha")
    before = mark(stack)
    body = {"model": "alpha", "stream": True, "x_chunks": 3, "x_delay": 0.3}
    await conn.send(post_json(CHAT, body))
    first = await conn.body_piece()
    # The first event is here while the model is still producing the rest (0.9 s in all).
    assert b"tok0" in first and b"[DONE]" not in first
    resp = await conn.response()
    assert resp.header("Content-Type") == "text/event-stream"
    assert resp.header("X-Accel-Buffering") == "no"
    assert resp.chunked and resp.body.endswith(b"data: [DONE]\n\n")
    assert await events_since(stack, before) == []


async def test_a_get_through_upstream_to_a_ready_model_stays_on_the_hot_path(
    stack: Stack, conn: RawConnection
) -> None:
    await _ready(stack, "alpha")
    before = mark(stack)
    await conn.send(b"GET /upstream/alpha/sse?n=50&size=8 HTTP/1.1\r\nHost: swapd\r\n\r\n")
    resp = await conn.response()
    assert resp.status == 200 and resp.chunked
    assert resp.header("X-Accel-Buffering") == "no"
    assert resp.body.count(b"data: xxxxxxxx\n\n") == 50 and resp.body.endswith(b"[DONE]\n\n")
    await conn.send(b"GET /upstream/alpha/a%2Fb/c?x=%20 HTTP/1.1\r\nHost: swapd\r\n\r\n")
    echoed = json.loads((await conn.response()).body)
    assert (echoed["method"], echoed["raw_path"]) == ("GET", "/a%2Fb/c?x=%20")
    assert await events_since(stack, before) == []


@pytest.mark.parametrize(
    ("path", "status", "reason"),
    [
        ("/upstream/alpha", 301, "no local model, or a redirect"),
        ("/upstream/nosuch/x", 404, "no local model, or a redirect"),
        ("/upstream/alpha/static/app.js", 200, "an ignored path"),
    ],
)
async def test_other_gets_through_upstream_are_lent_to_aiohttp(
    stack: Stack, conn: RawConnection, path: str, status: int, reason: str
) -> None:
    await _ready(stack, "alpha")
    before = mark(stack)
    await conn.send(f"GET {path} HTTP/1.1\r\nHost: swapd\r\n\r\n".encode())
    assert (await conn.response()).status == status
    assert await events_since(stack, before) == [f"lent: {reason}", "back"]


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
# what it hands to aiohttp, and that aiohttp then answers it


def chunked_post(path: str, body: bytes) -> bytes:
    """A POST whose JSON body is chunked: a request the hot path leaves to aiohttp."""
    head = f"POST {path} HTTP/1.1\r\nHost: swapd\r\nContent-Type: application/json\r\n"
    return head.encode() + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        len(body),
        body,
    )


def raw_post(path: str, body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: swapd\r\nContent-Type: application/json\r\n"
    return head.encode() + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


DECLINED = [
    pytest.param(
        chunked_post(CHAT, b'{"model":"alpha"}'), 200, "hello from alpha",
        ["lent: transfer-encoding", "back"],
        id="chunked-body",
    ),
    pytest.param(
        post_json(CHAT, {"model": "alpha"}, "Expect: 100-continue"), 200, "hello from alpha",
        ["lent: expect", "back"],
        id="expect-continue",
    ),
    pytest.param(
        post_json(CHAT, {"model": "alpha"}, version="1.0"), 200, "hello from alpha",
        ["lent: not HTTP/1.1"],
        id="http-1.0",
    ),
    pytest.param(
        b"POST /v1/chat/completions?model=alpha HTTP/1.1\r\nHost: swapd\r\n"
        b"Content-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi",
        200, "hello from alpha", ["lent: not a JSON body", "back"],
        id="query-model",
    ),
    pytest.param(
        post_json("/upstream/alpha/v1/chat/completions", {"model": "alpha"}), 200,
        "hello from alpha", ["lent: not a route of the hot path", "back"],
        id="upstream-route",
    ),
    pytest.param(
        post_json(CHAT, {"model": "alpha"}) + post_json(CHAT, {"model": "alpha"}), 200,
        "hello from alpha", ["handed: more bytes than one request"],
        id="pipelined-in-one-write",
    ),
    pytest.param(
        post_json(CHAT, {"model": "alpha", "pad": "x" * (1024 * 1024)}), 200, "hello from alpha",
        ["lent: no body of known, small length", "back"],
        id="body-over-1-MiB",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("request_bytes", "status", "text", "events"), DECLINED)
async def test_declined_requests_are_answered_by_aiohttp(
    stack: Stack,
    conn: RawConnection,
    request_bytes: bytes,
    status: int,
    text: str,
    events: list[str],
) -> None:
    await _ready(stack, "alpha")
    before = mark(stack)
    await conn.send(request_bytes)
    resp = await conn.response(30)
    assert resp.status == status
    assert text in resp.body.decode()
    if events[0].startswith("handed: "):
        assert (await conn.response()).status == 200  # the second of the two
    if b" HTTP/1.0\r\n" in request_bytes:
        assert await conn.closed_by_server(10)  # no keep-alive asked for
        assert (await events_since(stack, before))[:1] == events
        return
    # The connection stays usable, on the hot path again after a loan (no new event).
    await conn.send(post_json(CHAT, {"model": "alpha"}))
    assert (await conn.response()).status == 200
    assert await events_since(stack, before) == events


async def test_a_lent_request_that_ends_the_connection_leaves_it_to_aiohttp(
    stack: Stack, conn: RawConnection
) -> None:
    await _ready(stack, "alpha")
    before = mark(stack)
    await conn.send(b"GET /v1/models HTTP/1.1\r\nHost: swapd\r\nConnection: close\r\n\r\n")
    resp = await conn.response()
    assert resp.status == 200 and resp.header("Connection") == "close"
    assert await conn.closed_by_server(10)
    assert await events_since(stack, before) == ["lent: not a route of the hot path", "left"]


async def test_a_websocket_is_handed_to_aiohttp(stack: Stack) -> None:
    await _ready(stack, "alpha")
    before = mark(stack)
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(stack.url + "/upstream/alpha/ws") as ws:
            assert json.loads((await ws.receive(timeout=10)).data)["hello"] == "alpha"
            await ws.send_str("ping")
            assert (await ws.receive(timeout=10)).data == "echo:ping"
    assert await events_since(stack, before) == ["handed: upgrade"]


async def test_a_model_that_is_not_ready_is_started_from_the_hot_path(
    stack: Stack, conn: RawConnection, session: aiohttp.ClientSession
) -> None:
    async with session.post(stack.url + "/api/models/unload/lazy") as resp:
        assert resp.status == 200
    await _ready(stack, "alpha")
    before = mark(stack)
    await conn.send(post_json(CHAT, {"model": "lazy"}))
    resp = await conn.response(30)
    assert resp.status == 200
    assert json.loads(resp.body)["served_by"]["name"] == "lazy"
    await conn.send(post_json(CHAT, {"model": "lazy"}))
    assert (await conn.response()).status == 200
    assert await events_since(stack, before) == []


# ------------------------------------------------------------------------------------------------
# both paths answer alike


def _comparable(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted((k.lower(), v) for k, v in headers if k.lower() not in ("date", "content-length"))


async def _both_ways(stack: Stack, body: bytes) -> tuple[RawResponse, RawResponse]:
    """The same request answered by the hot path and by aiohttp, each on a fresh connection;
    checks that each went the way it should."""
    answers = []
    lent = ["lent: transfer-encoding", "back"]
    for request, events in ((raw_post(CHAT, body), []), (chunked_post(CHAT, body), lent)):
        before = mark(stack)
        conn = await RawConnection.open(stack.url)
        await conn.send(request)
        answers.append(await conn.response(30))
        await conn.close()
        assert await events_since(stack, before) == events
    return answers[0], answers[1]


def _alike(by_hot: RawResponse, by_aiohttp: RawResponse) -> None:
    assert by_hot.status == by_aiohttp.status
    assert _comparable(by_hot.headers) == _comparable(by_aiohttp.headers)
    assert by_hot.chunked == by_aiohttp.chunked


async def test_both_paths_stream_alike(stack: Stack) -> None:
    await _ready(stack, "alpha")
    by_hot, by_aiohttp = await _both_ways(stack, b'{"model":"alpha","stream":true,"x_chunks":2}')
    _alike(by_hot, by_aiohttp)
    assert by_hot.status == 200 and by_hot.chunked
    assert by_hot.body.count(b"tok") == by_aiohttp.body.count(b"tok") == 2


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
async def test_both_paths_answer_errors_alike(
    stack: Stack, body: bytes, status: int, text: str
) -> None:
    await _ready(stack, "alpha")
    by_hot, by_aiohttp = await _both_ways(stack, body)
    _alike(by_hot, by_aiohttp)
    assert by_hot.status == status
    assert by_hot.body == by_aiohttp.body
    assert text in json.loads(by_hot.body)["error"]["message"]


async def test_both_paths_answer_an_unreachable_upstream_alike(stack: Stack) -> None:
    await _ready_dead(stack)
    by_hot, by_aiohttp = await _both_ways(stack, b'{"model":"dead"}')
    _alike(by_hot, by_aiohttp)
    assert by_hot.status == 502
    assert by_hot.body == by_aiohttp.body
    message = json.loads(by_hot.body)["error"]["message"]
    assert message.startswith("upstream dead is not reachable: ")


async def test_both_paths_answer_the_concurrency_limit_alike(stack: Stack) -> None:
    await _ready(stack, "limited")
    busy = await RawConnection.open(stack.url)
    slow = {"model": "limited", "stream": True, "x_chunks": 100, "x_delay": 0.05}
    await busy.send(post_json(CHAT, slow))
    assert b"tok0" in await busy.body_piece()  # its one slot is taken
    by_hot, by_aiohttp = await _both_ways(stack, b'{"model":"limited"}')
    await busy.close()
    _alike(by_hot, by_aiohttp)
    assert by_hot.status == 429
    assert by_hot.header("Retry-After") == "1"
    assert by_hot.body == by_aiohttp.body
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
    before = mark(stack)
    scripted.answer(ScriptedUpstream.OK)  # the first request leaves its connection pooled
    scripted.answer(None)  # then the upstream drops it as the next request arrives
    for _ in range(2):
        await conn.send(post_json(CHAT, {"model": "scripted"}))
        resp = await conn.response()
        assert resp.status == 200 and resp.body == b'{"ok":true}'
    assert scripted.requests == 3  # the second request, sent again on a fresh connection
    assert await events_since(stack, before) == []


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
    # Both paths close a connection idle for 1 s (allow for a loaded machine).
    assert await hot.closed_by_server(10)
    assert await declined.closed_by_server(10)
