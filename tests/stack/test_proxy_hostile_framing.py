"""What must keep holding under hostile framing (issue 9, item 8), against the real stack over raw
sockets: no Content-Length / Transfer-Encoding combination desyncs the client, the proxy and the
model; pipelined requests are answered in order; no answer ever reaches another client's
connection.

The model `rec` is tests/support/upstreams/fake_model.py (standing for llama-server) started with
`--request-log`: what it records shows every request the proxy sent it, including one hidden in a
body that the proxy should never have sent as a request of its own.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest

from tests.support.hostile import CHAT, Hostile, echo_paths, exchange, recording_stack, request_head
from tests.support.proxy import RawConnection, post_json

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    with recording_stack(tmp_path_factory.mktemp("rec") / "requests.jsonl") as running:
        yield running


def _framings(smuggled: bytes) -> dict[str, tuple[list[str], bytes]]:
    """Ambiguous or obfuscated framings, each followed by a whole request of its own."""
    zero = b"0\r\n\r\n"
    return {
        "cl-and-te": (["Content-Length: 5", "Transfer-Encoding: chunked"], zero + smuggled),
        "te-and-long-cl": (["Transfer-Encoding: chunked", "Content-Length: 60"], zero + smuggled),
        "two-cls": (["Content-Length: 5", "Content-Length: 40"], b"hello" + smuggled),
        "cl-list": (["Content-Length: 5, 40"], b"hello" + smuggled),
        "te-xchunked": (["Transfer-Encoding: xchunked", "Content-Length: 5"], b"hello" + smuggled),
        "te-space-colon": (["Transfer-Encoding : chunked", "Content-Length: 5"], zero + smuggled),
        "te-vtab": (["Transfer-Encoding:\x0bchunked", "Content-Length: 5"], zero + smuggled),
        "te-twice": (
            ["Transfer-Encoding: chunked", "Transfer-Encoding: identity"],
            zero + smuggled,
        ),
        "te-identity-chunked": (["Transfer-Encoding: identity, chunked"], zero + smuggled),
        "te-chunked-gzip": (["Transfer-Encoding: chunked, gzip"], zero + smuggled),
        "chunk-size-0x": (["Transfer-Encoding: chunked"], b"0x5\r\nhello\r\n" + zero + smuggled),
        "chunk-size-plus": (["Transfer-Encoding: chunked"], b"+5\r\nhello\r\n" + zero + smuggled),
        "chunk-lf-only": (["Transfer-Encoding: chunked"], b"5\nhello\n0\n\n" + smuggled),
    }


FRAMING_IDS = list(_framings(b""))


@pytest.mark.parametrize("case", FRAMING_IDS)
@pytest.mark.parametrize("route", ["/upstream/rec/echo/carrier", CHAT])
async def test_no_framing_desyncs_client_proxy_and_model(
    hostile: Hostile, case: str, route: str
) -> None:
    tag = f"smuggled-{uuid.uuid4().hex[:12]}"
    smuggled = request_head(f"GET /upstream/rec/echo/{tag} HTTP/1.1")
    headers, body = _framings(smuggled)[case]
    mark = hostile.rec.mark()
    data = request_head(f"POST {route} HTTP/1.1", *headers) + body
    got = await exchange(hostile.stack, data, wait=3)
    assert all(0 < s < 500 for s in got.statuses), got
    for asked, answered in await echo_paths(hostile.stack, 2):
        assert answered == asked
    # The model saw the inner request only if the client did: then it was the client's own next
    # request, answered to the client.
    if any(tag in path for path in hostile.rec.paths_since(mark)):
        assert any(tag.encode() in r.body for r in got.responses), got


async def test_pipelined_requests_are_answered_in_order(hostile: Hostile) -> None:
    tags = [uuid.uuid4().hex[:8] for _ in range(3)]
    data = (
        post_json(CHAT, {"model": "rec", "x_delay": 0.3, "x_tag": tags[0]})
        + request_head(f"GET /upstream/rec/echo/{tags[1]} HTTP/1.1")
        + post_json(CHAT, {"model": "rec", "x_tag": tags[2]})
        + request_head("GET /health HTTP/1.1")
    )
    got = await exchange(hostile.stack, data, expect=4)
    assert got.statuses == [200, 200, 200, 200], got
    first, second, third = (json.loads(r.body) for r in got.responses[:3])
    assert first["request_body"]["x_tag"] == tags[0]
    assert second["raw_path"] == f"/echo/{tags[1]}"
    assert third["request_body"]["x_tag"] == tags[2]


async def test_no_answer_reaches_another_clients_connection(hostile: Hostile) -> None:
    async def client(n: int) -> list[tuple[str, str]]:
        conn = await RawConnection.open(hostile.stack.url)
        seen = []
        try:
            for i in range(6):
                tag = f"c{n}-r{i}-{uuid.uuid4().hex[:6]}"
                if i % 2:
                    await conn.send(request_head(f"GET /upstream/rec/echo/{tag} HTTP/1.1"))
                    answer = await conn.response()
                    assert answer.status == 200, answer
                    seen.append((tag, json.loads(answer.body)["raw_path"]))
                else:
                    body = {"model": "rec", "x_tag": tag, "x_delay": 0.01 * (n % 3)}
                    await conn.send(post_json(CHAT, body))
                    answer = await conn.response()
                    assert answer.status == 200, answer
                    seen.append((tag, json.loads(answer.body)["request_body"]["x_tag"]))
        finally:
            await conn.close()
        return seen

    for results in await asyncio.gather(*(client(n) for n in range(16))):
        for tag, answered in results:
            assert tag in answered
