"""The proxy's pure parts, without processes: body parsing and filters, key checks, the routing
table's lookups, and the lean upstream client against a raw asyncio server."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from multidict import CIMultiDict

from swapd.ipc.causes import WaitCause
from swapd.ipc.model_status import Waiting
from swapd.ipc.routing_table import RouteModel, RoutePeer, RoutingTable
from swapd.proxy.auth import check_api_key, presented_key
from swapd.proxy.floor.errors import (
    ProxyError,
    TooManyRequests,
    UpstreamBroken,
    UpstreamError,
    UpstreamRefused,
    error_body,
)
from swapd.proxy.loading import waiting_words
from swapd.proxy.mirror.state import Routes, per_process_limit
from swapd.proxy.routing.body import filter_json, multipart_field, replace_span
from swapd.proxy.upstream import conn as upstream_conn
from swapd.proxy.upstream.pool import UpstreamPool
from swapd.proxy.upstream.relay import cut_event, error_event
from tests.support.comfyui import until

# ------------------------------------------------------------------------------------------------
# body


def _form(*fields: tuple[str, bytes], boundary: str = "b0undary") -> bytes:
    parts = []
    for name, value in fields:
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            + value
            + b"\r\n"
        )
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


def test_multipart_field_found_anywhere_and_rewritten_in_place() -> None:
    body = _form(("file", b"\x00\r\n--not-a-boundary\r\n"), ("model", b"org/m:1"), ("x", b"y"))
    span = multipart_field(body, b"b0undary", "model")
    assert span is not None and body[span[0] : span[1]] == b"org/m:1"
    rewritten = replace_span(body, span, "other")
    new_span = multipart_field(rewritten, b"b0undary", "model")
    assert new_span is not None and rewritten[new_span[0] : new_span[1]] == b"other"
    assert rewritten.replace(b"other", b"org/m:1") == body
    assert multipart_field(_form(("file", b"1")), b"b0undary", "model") is None


@pytest.mark.parametrize(
    "body",
    [b"no boundary here", b'--b0undary\r\nContent-Disposition: form-data; name="model"\r\n\r\nm'],
)
def test_malformed_multipart_is_400(body: bytes) -> None:
    with pytest.raises(ProxyError) as error:
        multipart_field(body, b"b0undary", "model")
    assert error.value.status == 400


def test_filters_rename_strip_and_set_with_dotted_paths() -> None:
    body = json.dumps({"model": "a", "t": 1, "opts": {"x": 1, "y": 2}, "keep": [1]}).encode()
    out = json.loads(
        filter_json(
            body,
            model="b",
            strip=("t", "opts.x", "model", "missing.path"),
            set_params={"opts.z": 3, "new.deep": True, "model": "never"},
        )
    )
    assert out == {"model": "b", "opts": {"y": 2, "z": 3}, "keep": [1], "new": {"deep": True}}


def test_error_shape() -> None:
    """OpenAI's error object with `param` null, under llama-swap's `src` marker (its #1038)."""
    error = json.loads(error_body(429, "Too many requests", "concurrency_limit"))
    assert error == {
        "src": "swapd",
        "error": {
            "message": "Too many requests",
            "type": "rate_limit_error",
            "param": None,
            "code": "concurrency_limit",
        },
    }
    assert json.loads(error_body(504, "slow"))["error"]["code"] == "gateway_timeout"


# ------------------------------------------------------------------------------------------------
# keys


class _Req:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = CIMultiDict(headers)


def test_key_sources_in_priority_order() -> None:
    basic = "Basic " + base64.b64encode(b"u:from-basic").decode()
    assert presented_key(_Req({"Authorization": basic, "x-api-key": "k"})) == b"from-basic"
    assert presented_key(_Req({"Authorization": "BEARER tok"})) == b"tok"
    assert presented_key(_Req({"x-api-key": "k"})) == b"k"
    assert presented_key(_Req({})) is None
    check_api_key(_Req({"x-api-key": "two"}), (b"one", b"two"))  # type: ignore[arg-type]
    with pytest.raises(ProxyError) as error:
        check_api_key(_Req({"x-api-key": "three"}), (b"one", b"two"))  # type: ignore[arg-type]
    assert error.value.status == 401 and "WWW-Authenticate" in (error.value.headers or {})


# ------------------------------------------------------------------------------------------------
# routing table


def test_routes_lookups() -> None:
    table = RoutingTable(
        generation=3,
        models=(
            RouteModel(id="a", upstream="http://x", concurrency_limit=10, ttl=0, aliases=("b",)),
            RouteModel(id="b", upstream="http://y", concurrency_limit=10, ttl=0),
        ),
        peers=(
            RoutePeer(id="p1", proxy="http://p1", models=("shared", "only1", "a")),
            RoutePeer(id="p2", proxy="http://p2", models=("shared",)),
        ),
        ignore_paths=(r".*\.js$", "(unbalanced"),
    )
    routes = Routes(table)
    assert routes.by_name["b"].id == "b"  # an id wins over another model's alias
    assert routes.peers["only1"].peer.id == "p1"
    assert "shared" not in routes.peers  # offered by two peers: only the FQN works
    assert routes.peers["p2/shared"].model == "shared"
    assert routes.path_ignored("/x/app.js") and not routes.path_ignored("/x/app.jsx")
    assert per_process_limit(10, 3) == 4 and per_process_limit(1, 4) == 1


# ------------------------------------------------------------------------------------------------
# the lean upstream client (httptools parses), against a scripted raw asyncio server

Respond = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def _upstream(respond: Respond) -> AsyncIterator[tuple[UpstreamPool, int, list[int]]]:
    """A raw server running `respond` per connection, and a pool; the list counts connections."""
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await respond(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client dropped the connection: what some tests expect
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    pool = UpstreamPool()
    try:
        yield pool, server.sockets[0].getsockname()[1], accepted
    finally:
        pool.close()
        server.close()
        await server.wait_closed()


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


async def _trickle(writer: asyncio.StreamWriter, data: bytes) -> None:
    """One byte per write, yielding in between: the client sees every split point."""
    for i in range(len(data)):
        writer.write(data[i : i + 1])
        await writer.drain()
        await asyncio.sleep(0)


GET = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
HEAD = b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n"


async def test_chunked_body_split_at_every_byte_and_keep_alive_reuse() -> None:
    response_bytes = (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
        b"HTTP/1.1 200 Fine Thanks\r\nTransfer-Encoding: chunked\r\nX-A: 1  \r\n\r\n"
        b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nTrailer-A: x\r\n\r\n"
    )

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(3):
            await _read_head(reader)
            await _trickle(writer, response_bytes)

    async with _upstream(respond) as (pool, port, accepted):
        for _ in range(3):
            response = await pool.request("127.0.0.1", port, GET, None)
            assert (response.status, response.reason) == (200, "Fine Thanks")
            # neither the interim heads' headers nor the trailer belong to the response
            assert response.headers == [("Transfer-Encoding", "chunked"), ("X-A", "1")]
            assert response.chunked and response.content_length is None
            assert await response.read() == b"hello world"
        assert len(accepted) == 1


async def test_content_length_body_split_at_every_byte_and_keep_alive_reuse() -> None:
    body = b"0123456789" * 3

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            await _read_head(reader)
            await _trickle(writer, b"HTTP/1.1 201 Created\r\nContent-Length: 30\r\n\r\n" + body)

    async with _upstream(respond) as (pool, port, accepted):
        for _ in range(2):
            response = await pool.request("127.0.0.1", port, GET, None)
            assert response.status == 201 and response.content_length == 30
            assert b"".join([chunk async for chunk in response.iter_chunks()]) == body
        assert len(accepted) == 1


async def test_streamed_chunked_upload_then_body_broken_off() -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await _read_head(reader)
        assert b"Transfer-Encoding: chunked" in head
        got = b""
        while not got.endswith(b"0\r\n\r\n"):
            got += await reader.read(65536)
        assert got == b"3\r\nabc\r\n" * 3 + b"0\r\n\r\n"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        await writer.drain()  # then close early: a broken body

    async def upload() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"abc"

    async with _upstream(respond) as (pool, port, _):
        chunked_head = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        response = await pool.request("127.0.0.1", port, chunked_head, upload(), chunked=True)
        assert response.content_length == 100
        with pytest.raises(UpstreamBroken):
            await response.read()


async def test_chunked_body_broken_off_mid_chunk() -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel")
        await writer.drain()

    async with _upstream(respond) as (pool, port, _):
        response = await pool.request("127.0.0.1", port, GET, None)
        assert await response.read_chunk() == b"hel"
        with pytest.raises(UpstreamBroken):
            await response.read_chunk()


async def test_body_until_close_is_complete_and_the_connection_not_reused() -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
        await _trickle(writer, b"all of it")

    async with _upstream(respond) as (pool, port, accepted):
        for _ in range(2):
            response = await pool.request("127.0.0.1", port, GET, None)
            assert response.content_length is None and not response.chunked
            assert await response.read() == b"all of it"
        assert len(accepted) == 2


async def test_head_response_has_no_body_and_the_connection_is_reused() -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        # a HEAD response announces the GET's body without sending it
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n")
        await _read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nget")
        await reader.read()

    async with _upstream(respond) as (pool, port, accepted):
        response = await pool.request("127.0.0.1", port, HEAD, None, head_request=True)
        assert response.status == 200 and response.content_length == 12
        assert await response.read() == b""
        response = await pool.request("127.0.0.1", port, GET, None)
        assert await response.read() == b"get"
        assert len(accepted) == 1


@pytest.mark.parametrize("status", [204, 304])
async def test_no_body_statuses_ignore_content_length(status: int) -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        writer.write(b"HTTP/1.1 %d Nothing\r\nContent-Length: 7\r\nETag: e\r\n\r\n" % status)
        await _read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await reader.read()

    async with _upstream(respond) as (pool, port, accepted):
        response = await pool.request("127.0.0.1", port, GET, None)
        assert response.status == status and response.content_length == 0
        assert await response.read() == b""
        response = await pool.request("127.0.0.1", port, GET, None)
        assert await response.read() == b"ok"
        assert len(accepted) == 1


async def test_kept_alive_connection_closed_while_idle_is_retried_once() -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        # then close: the pool still holds the connection as idle

    async with _upstream(respond) as (pool, port, accepted):
        assert await (await pool.request("127.0.0.1", port, GET, None)).read() == b"ok"
        assert await (await pool.request("127.0.0.1", port, GET, None)).read() == b"ok"
        assert len(accepted) == 2


async def test_the_retry_after_a_dead_idle_connection_is_on_a_fresh_one() -> None:
    """Two kept-alive connections that the upstream drops when the next request comes (a
    restarted upstream: every old connection is dead): the retry must not take the other
    idle one, which fails the same way."""
    old = 2

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nth = len(accepted)
        await _read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        if nth <= old:
            await _read_head(reader)  # the next request on it: dropped unanswered

    async with _upstream(respond) as (pool, port, accepted):
        first = await asyncio.gather(
            *(pool.request("127.0.0.1", port, GET, None) for _ in range(old))
        )
        assert [await r.read() for r in first] == [b"ok"] * old  # both idle in the pool now
        again = await pool.request("127.0.0.1", port, GET, None, idempotent=True)
        assert await again.read() == b"ok"
        assert len(accepted) == old + 1  # one idle connection tried, then a fresh one


async def test_a_post_the_upstream_may_have_read_is_not_sent_twice() -> None:
    """A reused connection that closes after a POST was written, before any byte of the answer:
    the upstream may have acted on it (Go's and nginx's rule), so it is not sent again."""
    post = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        await reader.readexactly(2)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await _read_head(reader)  # the next one: read, then the connection dropped unanswered
        await reader.readexactly(2)

    async with _upstream(respond) as (pool, port, accepted):
        assert await (await pool.request("127.0.0.1", port, post, b"hi")).read() == b"ok"
        with pytest.raises(UpstreamError):
            await pool.request("127.0.0.1", port, post, b"hi")
        assert len(accepted) == 1


async def test_a_post_on_a_connection_reset_unread_is_sent_again() -> None:
    """The upstream closes a kept-alive connection a moment after the next request arrived, with
    that request unread (llama-server after a streamed answer): a socket closed with bytes unread
    is reset, so the request cannot have been processed, and it goes again on a fresh one."""
    post = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []

    def serve() -> None:
        first, _ = listener.accept()
        accepted.append(first)
        first.recv(65536)
        first.sendall(answer)
        select.select([first], [], [], 30)  # the next request has come: closed unread (a reset)
        first.close()
        second, _ = listener.accept()
        accepted.append(second)
        second.recv(65536)
        second.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    pool = UpstreamPool()
    try:
        assert await (await pool.request("127.0.0.1", port, post, b"hi")).read() == b"ok"
        assert await (await pool.request("127.0.0.1", port, post, b"hi")).read() == b"ok"
        assert len(accepted) == 2
    finally:
        pool.close()
        await asyncio.to_thread(thread.join, 30)
        listener.close()
        for sock in accepted:
            sock.close()


async def test_an_idle_connection_with_an_end_of_file_waiting_is_not_handed_out() -> None:
    """The upstream closed the idle connection and the loop has not yet read its end of file
    (llama-server closes after a streamed answer): the pool looks before it hands it out."""
    closed = asyncio.Event()

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        if len(accepted) == 1:
            writer.close()
            closed.set()
            return
        await _read_head(reader)

    async with _upstream(respond) as (pool, port, accepted):
        first = await pool.request("127.0.0.1", port, GET, None)
        assert await first.read() == b"ok"
        (idle,) = pool._idle[("127.0.0.1", port)]
        assert idle.transport is not None
        idle.transport.pause_reading()  # the loop reads nothing of it: the close is not seen
        await closed.wait()
        # The end of file has reached this side's socket; the loop has not read it.
        await until(lambda: select.select((idle.fd,), (), (), 0)[0], what="the upstream's FIN")
        assert not idle.closed

        async def upload() -> AsyncIterator[bytes]:
            yield b"hi"

        # A streamed body, sent with no retry possible: it must go on a live connection.
        post = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        second = await pool.request("127.0.0.1", port, post, upload(), chunked=True)
        assert await second.read() == b"ok"
        assert idle.closed and len(accepted) == 2


async def test_refused_connection_is_upstream_error() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    # Refused: nothing was sent (the pipeline may send it again once the model is back).
    with pytest.raises(UpstreamRefused, match="cannot connect"):
        await UpstreamPool().request("127.0.0.1", port, GET, None)


async def test_closed_before_any_response_byte_is_upstream_error() -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)

    async with _upstream(respond) as (pool, port, _):
        with pytest.raises(UpstreamError):
            await pool.request("127.0.0.1", port, GET, None)


@pytest.mark.parametrize(
    "answer",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"x" * (128 * 1024),
    ],
    ids=[
        "status-line",
        "status",
        "length",
        "two-lengths",
        "length-and-chunked",
        "name",
        "101",
        "huge",
    ],
)
async def test_malformed_response_is_upstream_error(answer: bytes) -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        writer.write(answer)
        await writer.drain()
        await reader.read()  # hold the connection open: the client must give up by itself

    async with _upstream(respond) as (pool, port, _):
        with pytest.raises(UpstreamError):
            await pool.request("127.0.0.1", port, GET, None)


async def test_malformed_chunk_size_breaks_the_body() -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\nzz\r\n")
        await reader.read()

    async with _upstream(respond) as (pool, port, _):
        response = await pool.request("127.0.0.1", port, GET, None)
        with pytest.raises(UpstreamBroken):
            await response.read()


async def test_bytes_answering_no_request_drop_the_connection() -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n")
        await reader.read()

    async with _upstream(respond) as (pool, port, accepted):
        for _ in range(2):
            assert await (await pool.request("127.0.0.1", port, GET, None)).read() == b"ok"
        assert len(accepted) == 2


async def test_reading_pauses_past_the_high_water_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    body = bytes(range(256)) * (128 * 1024)  # 32 MiB: more than the kernel buffers on loopback
    sent = asyncio.Event()
    paused = asyncio.Event()
    pause = upstream_conn.UpstreamConn.pause

    def pause_and_tell(conn: upstream_conn.UpstreamConn) -> None:
        pause(conn)
        paused.set()

    monkeypatch.setattr(upstream_conn.UpstreamConn, "pause", pause_and_tell)

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        sent.set()

    async with _upstream(respond) as (pool, port, _):
        response = await pool.request("127.0.0.1", port, GET, None)
        # nobody reads the body: past the high-water mark the client stops reading the socket,
        # so the upstream cannot finish sending
        await asyncio.wait_for(paused.wait(), 10)
        transport = response._conn.transport
        assert transport is not None and not transport.is_reading()
        assert not sent.is_set()
        assert await response.read() == body
        await asyncio.wait_for(sent.wait(), 10)


# ------------------------------------------------------------------------------------------------
# activity casts (admission.py): rate-limited, the idle->busy edge at once, busy->idle once idle


class _RecordingLink:
    """Records the casts `Admission` makes; stands in for `DaemonLink`'s DEALER socket, which the
    process tests exercise for real."""

    def __init__(self) -> None:
        self.casts: list[tuple[str, int]] = []

    def activity(
        self,
        model: str,
        in_flight: int,
        at: float | None = None,
        claimed: int = 0,
        websockets: int = 0,
    ) -> None:
        self.casts.append((model, in_flight))

    def drained(self, model: str, epoch: int) -> None:
        pass


async def _flushed(rt: Any) -> None:
    """Until the pending cast for `rt` went out (or found nothing to send); polled, for 10 s."""
    assert rt.activity_timer is not None
    deadline = time.monotonic() + 10
    while rt.activity_timer is not None:
        assert time.monotonic() < deadline, "the pending activity cast never went out"
        await asyncio.sleep(0.01)


async def test_activity_tells_busy_at_once_idle_once_idle_and_folds_the_rest() -> None:
    """The daemon's view of a model in use is current when a swap decides (docs/swapping.md, "No
    one client thrashes"): a request that begins on an idle model is told at once; its end once
    the model stayed idle IDLE_EDGE_S, so back-to-back requests are one busy stretch with no cast
    of their own."""
    from swapd.ipc.model_status import ModelStatus
    from swapd.ipc.timings import IDLE_EDGE_S
    from swapd.proxy.admission import Admission
    from swapd.proxy.mirror.state import ModelRuntime, ProxyState

    link = _RecordingLink()
    admission = Admission(ProxyState(), link)  # type: ignore[arg-type]
    route = RouteModel(id="m", upstream="http://127.0.0.1:1", concurrency_limit=10, ttl=60)
    rt = ModelRuntime(id="m", route=route, limit=10, status=ModelStatus(model="m", state="ready"))

    admission.begin(rt)
    assert link.casts == [("m", 1)]  # idle -> busy: at once, not at the second's end
    admission.end(rt)
    assert link.casts == [("m", 1)]  # busy -> idle: not yet
    assert rt.activity_timer is not None
    loop = asyncio.get_running_loop()
    assert rt.activity_due <= loop.time() + IDLE_EDGE_S

    for _ in range(50):  # a burst of back-to-back requests: the daemon hears "busy" throughout
        admission.begin(rt)
        admission.end(rt)
    assert link.casts == [("m", 1)]
    await _flushed(rt)  # idle since the burst's last request: told once
    assert link.casts == [("m", 1), ("m", 0)]

    # A request that begins again before the idle edge went out: nothing to tell but the
    # second's cast (the daemon was told busy, and busy it is).
    admission.begin(rt)
    assert link.casts == [("m", 1), ("m", 0), ("m", 1)]
    admission.end(rt)
    admission.begin(rt)
    await _flushed(rt)
    assert link.casts[-1] == ("m", 1) and len(link.casts) <= 4
    admission.end(rt)
    await _flushed(rt)
    assert link.casts[-1] == ("m", 0)


async def test_a_slot_owns_its_reserve_begin_end_and_release_however_the_request_ends() -> None:
    """`admission.Slot`: one `async with` reserves (429 past the model's share), releases on exit,
    and ends the request on exit while it is in flight, never twice (a drain's ack waits on it)."""
    from swapd.ipc.model_status import ModelStatus
    from swapd.proxy.admission import Admission
    from swapd.proxy.mirror.state import ModelRuntime, ProxyState

    admission = Admission(ProxyState(), _RecordingLink())  # type: ignore[arg-type]
    route = RouteModel(id="m", upstream="http://127.0.0.1:1", concurrency_limit=1, ttl=60)
    rt = ModelRuntime(id="m", route=route, limit=1, status=ModelStatus(model="m", state="ready"))

    async with admission.slot(rt) as slot:
        assert (rt.reserved, rt.in_flight) == (1, 0)
        with pytest.raises(TooManyRequests):
            async with admission.slot(rt):
                pass
        slot.begin()
        assert rt.in_flight == 1
        slot.end()
        slot.end()  # out of flight once only
        assert rt.in_flight == 0
        slot.begin()
    assert (rt.reserved, rt.in_flight) == (0, 0)  # ended and released on the way out

    with pytest.raises(RuntimeError):
        async with admission.slot(rt) as slot:
            slot.begin()
            raise RuntimeError("the client went away")
    assert (rt.reserved, rt.in_flight) == (0, 0)


async def test_an_ignored_websocket_opening_or_closing_is_told_at_once_and_is_not_use() -> None:
    """`Admission.sockets_changed`: the daemon keeps an asleep model with an open websocket from
    its `stopAfter` (issue 37 item 5), so the count goes out when it turns non-zero or zero,
    carrying the last request's time unchanged (a websocket is not TTL activity)."""
    from swapd.ipc.model_status import ModelStatus
    from swapd.proxy.admission import Admission
    from swapd.proxy.mirror.state import ModelRuntime, ProxyState

    sent: list[tuple[int, float | None, int]] = []

    class Link(_RecordingLink):
        def activity(
            self,
            model: str,
            in_flight: int,
            at: float | None = None,
            claimed: int = 0,
            websockets: int = 0,
        ) -> None:
            sent.append((in_flight, at, websockets))

    admission = Admission(ProxyState(), Link())  # type: ignore[arg-type]
    route = RouteModel(id="m", upstream="http://127.0.0.1:1", concurrency_limit=10, ttl=60)
    rt = ModelRuntime(id="m", route=route, limit=10, status=ModelStatus(model="m", state="asleep"))
    rt.last_activity = 123.0
    tab = object()
    rt.ignored_ws.add(tab)
    admission.sockets_changed(rt)
    assert sent == [(0, 123.0, 1)]
    rt.ignored_ws.discard(tab)
    admission.sockets_changed(rt)  # within the same second: the edge still goes at once
    assert sent == [(0, 123.0, 1), (0, 123.0, 0)]
    assert rt.last_activity == 123.0


def test_the_loading_progress_says_what_a_swap_waits_for() -> None:
    """`proxy/loading.py`'s words for a target's `waiting` (the daemon's): the busy models that
    hold it and until when (a clock time: the line is written once), else the scheduler's own."""
    until = time.mktime((2026, 1, 2, 14, 3, 7, 0, 0, -1))
    held = Waiting(reason="busy: a", since=until - 600, holding=("a",), until=until)
    assert waiting_words(held) == (
        "waiting for a to finish its work (busyCheck: busy); at most until 14:03:07"
    )
    both = Waiting(reason="busy: a, b", holding=("a", "b"))
    assert waiting_words(both) == "waiting for a, b to finish their work (busyCheck: busy)"
    queued = Waiting(reason="behind the swap to c in the queue")
    assert waiting_words(queued) == "waiting: behind the swap to c in the queue"
    # Collation, from its type: the loaded model served first, and how much longer at most.
    collating = Waiting(
        reason="requests in flight for gemma-a (collation)",
        until=time.time() + 4.25,
        cause=WaitCause.COLLATION,
        serving=("gemma-a",),
    )
    words = waiting_words(collating)
    assert words.startswith("waiting: serving gemma-a's queue first; at most 4.")
    assert words.endswith(" s more")


def test_a_cut_event_stream_ends_with_an_error_event_of_its_own() -> None:
    """`relay.cut_event`: the SSE event that ends a cut event stream, closing a half-sent event
    first, so that the error is an event of its own whatever the cut fell on."""
    broken = ConnectionResetError("reset")
    whole = cut_event(b'data: {"choices": []}\n\n', True, "a", broken)
    assert whole.startswith(b"data: ") and whole.endswith(b"\n\n")
    error = json.loads(whole[len(b"data: ") :])["error"]
    assert (error["code"], error["type"]) == ("shutting_down", "server_error")
    half = cut_event(b'data: {"choi', False, "a", broken)
    assert half.startswith(b"\n\ndata: ")
    error = json.loads(half[len(b"\n\ndata: ") :])["error"]
    assert error["code"] == "upstream_broke_off" and "upstream a broke off" in error["message"]
    assert cut_event(b"", True, "a", broken).startswith(b"data: ")
    assert cut_event(b"data: x\r\n\r\n", True, "a", broken).startswith(b"data: ")


def test_an_error_answer_inside_an_event_stream_is_one_error_event() -> None:
    own = b'{"error": {"code": 500,\n "message": "tools param requires --jinja flag"}}'
    assert error_event(500, "Internal Server Error", own, "m") == (
        b'data: {"error":{"code":500,"message":"tools param requires --jinja flag"}}\n\n'
    )
    for body, said in [
        (b'{"error": "no such slot"}', "upstream m answered 404 Not Found: no such slot"),
        (b"<html>gone</html>", "upstream m answered 404 Not Found: <html>gone</html>"),
        (b"[" * 2000, "upstream m answered 404 Not Found: " + "[" * 500),
        (b"", "upstream m answered 404 Not Found"),
    ]:
        event = error_event(404, "Not Found", body, "m")
        assert event.startswith(b"data: ") and event.endswith(b"\n\n")
        assert event.count(b"\n") == 2  # one line: an SSE event
        error = json.loads(event[6:])["error"]
        assert error["message"] == said and error["code"] == "not_found"
