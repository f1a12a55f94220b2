"""The proxy's pure parts, without processes: body parsing and filters, key checks, the routing
table's lookups, and the lean upstream client against a raw asyncio server."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable

import pytest
from multidict import CIMultiDict

from swapd.ipc.messages import RouteModel, RoutePeer, RoutingTable
from swapd.proxy.auth import check_api_key, presented_key
from swapd.proxy.body import filter_json, multipart_field, replace_span
from swapd.proxy.errors import ProxyError, error_body
from swapd.proxy.state import Routes, per_process_limit
from swapd.proxy.upstream_client import UpstreamBroken, UpstreamError, UpstreamPool

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
    error = json.loads(error_body(429, "Too many requests", "concurrency_limit"))
    assert error == {
        "error": {
            "message": "Too many requests",
            "type": "rate_limit_error",
            "code": "concurrency_limit",
        }
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
# the lean upstream client, against a scripted raw server


async def _server(
    respond: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object],
) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await respond(reader, writer)  # type: ignore[misc]
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


HEAD = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


async def test_chunked_body_split_anywhere_and_keep_alive_reuse() -> None:
    connections = 0
    body = b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nTrailer: x\r\n\r\n"

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        for _ in range(2):
            await _read_head(reader)
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n")
            for i in range(len(body)):  # one byte at a time: every split point
                writer.write(body[i : i + 1])
                await writer.drain()
                await asyncio.sleep(0)

    server, port = await _server(respond)
    pool = UpstreamPool()
    try:
        for _ in range(2):
            response = await pool.request("127.0.0.1", port, HEAD, None)
            assert response.status == 200 and ("X-A", "1") in response.headers
            assert await response.read() == b"hello world"
        assert connections == 1
    finally:
        pool.close()
        server.close()


async def test_content_length_body_streaming_upload_and_broken_body() -> None:
    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await _read_head(reader)
        assert b"Transfer-Encoding: chunked" in head
        got = b""
        while not got.endswith(b"0\r\n\r\n"):
            got += await reader.read(65536)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        await writer.drain()  # then close early: a broken body

    async def upload() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"abc"

    server, port = await _server(respond)
    pool = UpstreamPool()
    try:
        chunked_head = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        response = await pool.request("127.0.0.1", port, chunked_head, upload(), chunked=True)
        assert response.content_length == 100
        with pytest.raises(UpstreamBroken):
            await response.read()
    finally:
        pool.close()
        server.close()


async def test_refused_connection_is_upstream_error() -> None:
    server, port = await _server(lambda r, w: asyncio.sleep(0))
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamError):
        await UpstreamPool().request("127.0.0.1", port, HEAD, None)
