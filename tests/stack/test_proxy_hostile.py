"""Hostile requests against the real stack, over raw sockets (issue 9, item 8): what a client sends
reaches the model as it was sent or is refused with a 4xx, and nothing it sends costs the proxy
unbounded memory, CPU or time. (Framing, pipelining and one answer per client:
test_proxy_hostile_framing.py.)

The model `rec` is tests/support/upstreams/fake_model.py (standing for llama-server) started with
`--request-log`: it records every request it receives, body bytes as they came (it does not
decompress them), so a test sees exactly what the proxy sent it, including a request the proxy
should never have sent.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
import uuid
import zlib
from collections.abc import Iterator

import pytest

from tests.support.hostile import (
    CHAT,
    Hostile,
    ProxyLogs,
    body_of,
    echo_paths,
    exchange,
    header_of,
    is_openai_error,
    peak_rss,
    proxy_process,
    recording_stack,
    request_head,
    reset_peak_rss,
)
from tests.support.proxy import RawConnection, post_json
from tests.support.stack import Stack

pytestmark = pytest.mark.processes

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    with recording_stack(tmp_path_factory.mktemp("rec") / "requests.jsonl") as running:
        yield running


# ------------------------------------------------------------------------------------------------
# Content-Encoding: the body goes upstream as it came


def _smuggling_gzip(tag: str) -> tuple[bytes, bytes]:
    """A gzip body whose *decompressed* bytes are exactly as long as the compressed ones plus a
    whole second request: forwarded decompressed under the client's Content-Length, the model
    would take that second request for one of its own (slow, so its answer goes to whoever uses
    the pooled connection next)."""
    forged = json.dumps({"x_delay": 0.5, "x_tag": tag}).encode()
    inner = (
        f"POST {CHAT} HTTP/1.1\r\nHost: swapd\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(forged)}\r\n\r\n"
    ).encode() + forged
    for pad in range(2000):
        shown = b'{"pad":"' + b"a" * pad + b'"}'
        compressed = gzip.compress(shown + inner, mtime=0)
        if len(compressed) == len(shown):
            return compressed, shown + inner
    raise AssertionError("no padding makes the lengths meet")


async def test_a_gzip_body_through_upstream_arrives_as_sent_and_smuggles_nothing(
    hostile: Hostile,
) -> None:
    tag = f"FORGED-{uuid.uuid4().hex}"
    compressed, _ = _smuggling_gzip(tag)
    mark = hostile.rec.mark()
    head = request_head(
        "POST /upstream/rec/echo/carrier HTTP/1.1",
        "Content-Type: application/json",
        "Content-Encoding: gzip",
        f"Content-Length: {len(compressed)}",
    )
    got = await exchange(hostile.stack, head + compressed)
    assert got.statuses == [200], got
    # Whoever comes next on the pooled upstream connection gets their own answer.
    for asked, answered in await echo_paths(hostile.stack, 3):
        assert answered == asked
    seen = hostile.rec.since(mark)
    assert not any(tag.encode() in body_of(e) for e in seen), "the model got the forged request"
    (entry,) = [e for e in seen if e["raw_path"] == "/echo/carrier"]
    assert body_of(entry) == compressed  # byte for byte, still compressed
    assert header_of(entry, "Content-Encoding") == ["gzip"]
    assert header_of(entry, "Content-Length") in ([], [str(len(compressed))])


async def test_a_gzip_body_on_a_model_route_smuggles_nothing(hostile: Hostile) -> None:
    tag = f"FORGED-{uuid.uuid4().hex}"
    compressed, _ = _smuggling_gzip(tag)
    mark = hostile.rec.mark()
    head = request_head(
        f"POST {CHAT} HTTP/1.1",
        "Content-Type: application/json",
        "Content-Encoding: gzip",
        f"Content-Length: {len(compressed)}",
    )
    got = await exchange(hostile.stack, head + compressed)
    # Decoded to find the model, it is no JSON (a request follows it): a 400, nothing sent on.
    assert got.statuses == [400] and is_openai_error(got.responses[0], 400), got
    for asked, answered in await echo_paths(hostile.stack, 3):
        assert answered == asked
    assert not any(e["raw_path"] == CHAT for e in hostile.rec.since(mark))


async def test_a_gzip_json_body_on_a_model_route_is_served(hostile: Hostile) -> None:
    plain = json.dumps({"model": "rec", "x_tag": uuid.uuid4().hex}).encode()
    compressed = gzip.compress(plain)
    mark = hostile.rec.mark()
    head = request_head(
        f"POST {CHAT} HTTP/1.1",
        "Content-Type: application/json",
        "Content-Encoding: gzip",
        f"Content-Length: {len(compressed)}",
    )
    got = await exchange(hostile.stack, head + compressed)
    assert got.statuses == [200], got
    (entry,) = hostile.rec.since(mark)
    if header_of(entry, "Content-Encoding") == ["gzip"]:
        assert body_of(entry) == compressed  # as the client sent it
    else:  # or decoded (a rewrite), and then described by its own length
        assert body_of(entry) == plain
    assert header_of(entry, "Content-Length") == [str(len(body_of(entry)))]


def _bomb(size: int) -> bytes:
    """A gzip body that inflates to `size` bytes of JSON naming the model (about size/1000)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(b'{"model":"rec","pad":"')]
    block = b"a" * MiB
    for _ in range(size // MiB):
        parts.append(packer.compress(block))
    parts += [packer.compress(b'"}'), packer.flush()]
    return b"".join(parts)


# JSON bodies are read to find the model; multipart bodies to find the form field `model`.
BODY_TYPES = ["application/json", "multipart/form-data; boundary=swapd-hostile"]


@pytest.mark.parametrize("content_type", BODY_TYPES, ids=["json", "multipart"])
async def test_a_gzip_bomb_is_refused_within_bounded_memory(
    hostile: Hostile, content_type: str
) -> None:
    proxy = proxy_process(hostile.stack)
    bomb = _bomb(600 * MiB)
    before = proxy.memory_info().rss
    reset_peak_rss(proxy)
    head = request_head(
        f"POST {CHAT} HTTP/1.1",
        f"Content-Type: {content_type}",
        "Content-Encoding: gzip",
        f"Content-Length: {len(bomb)}",
    )
    got = await exchange(hostile.stack, head + bomb, wait=60)
    grew = (peak_rss(proxy) - before) / MiB
    # The body limit is 64 MiB of what is read: a decoded copy or two of that, never 600 MiB.
    assert grew < 200, f"the proxy grew by {grew:.0f} MiB reading a {len(bomb)}-byte body"
    assert got.statuses in ([413], [400]) and is_openai_error(got.responses[0]), got


@pytest.mark.parametrize("content_type", BODY_TYPES, ids=["json", "multipart"])
async def test_a_body_labelled_gzip_that_is_not_gzip_is_400(
    hostile: Hostile, content_type: str
) -> None:
    data = json.dumps({"model": "rec"}).encode()
    head = request_head(
        f"POST {CHAT} HTTP/1.1",
        f"Content-Type: {content_type}",
        "Content-Encoding: gzip",
        f"Content-Length: {len(data)}",
    )
    got = await exchange(hostile.stack, head + data)
    assert got.statuses == [400] and is_openai_error(got.responses[0], 400), got


@pytest.mark.parametrize("nest", ["[", '{"a":'])
async def test_json_nested_5000_deep_is_400(hostile: Hostile, nest: str) -> None:
    close = "]" if nest == "[" else "}"
    body = '{"model":"rec","messages":' + nest * 5000 + "1" + close * 5000 + "}"
    data = body.encode()
    head = request_head(
        f"POST {CHAT} HTTP/1.1", "Content-Type: application/json", f"Content-Length: {len(data)}"
    )
    got = await exchange(hostile.stack, head + data)
    assert got.statuses == [400] and is_openai_error(got.responses[0], 400), got


# ------------------------------------------------------------------------------------------------
# heads: bounded in size and in time, and parsed in linear time


async def test_long_upstream_paths_do_not_stall_the_proxy(hostile: Hostile) -> None:
    attack = request_head("GET /upstream/rec/" + "a/" * 30_000 + " HTTP/1.1")
    sent = [asyncio.Event() for _ in range(4)]
    attackers = [
        asyncio.ensure_future(exchange(hostile.stack, attack, wait=60, sent=event))
        for event in sent
    ]
    # Their heads are with the proxy before the health check is asked for.
    async with asyncio.timeout(60):
        for event in sent:
            await event.wait()
    start = time.monotonic()
    # Generous for a loaded 2-core machine; the quadratic resolution took 36 s here.
    health = await exchange(hostile.stack, request_head("GET /health HTTP/1.1"), wait=5)
    took = time.monotonic() - start
    # Their answers first, so that a proxy still busy with them cannot fail the next tests.
    answers = await asyncio.gather(*attackers)
    assert health.statuses == [200], f"/health: {health} after {took:.1f}s"
    for done in answers:
        assert done.closed or (done.statuses and 400 <= done.statuses[0] < 500), done


@pytest.mark.parametrize(
    "head",
    [
        request_head("GET /v1/models?q=" + "a" * 9000 + " HTTP/1.1"),
        request_head("GET /upstream/rec/" + "a" * 9000 + " HTTP/1.1"),
        request_head("GET /health HTTP/1.1", "X-Long: " + "a" * 9000),
        request_head("GET /health HTTP/1.1", *(f"X-Many-{i}: {'a' * 100}" for i in range(1000))),
    ],
    ids=["request-line", "upstream-path", "header-line", "many-headers"],
)
async def test_heads_over_the_limit_are_4xx(hostile: Hostile, head: bytes) -> None:
    got = await exchange(hostile.stack, head)
    assert got.statuses and 400 <= got.statuses[0] < 500, got


async def test_heads_under_the_limit_are_served(hostile: Hostile) -> None:
    long_line = "X-Long: " + "a" * 8000
    got = await exchange(hostile.stack, request_head("GET /health HTTP/1.1", long_line))
    assert got.statuses == [200], got


# How long a client trickles its head: twice the proxy's 10 s for a whole head.
HEAD_DEADLINE_S = 20.0


async def _trickle(stack: Stack) -> bool:
    """Send a head a byte every 0.2 s, never finishing it: whether the proxy gave up on it (closed
    the connection or answered) before the client did, well past the proxy's time for a head."""
    conn = await RawConnection.open(stack.url)
    start = time.monotonic()
    try:
        await conn.send(b"GET /health HTTP/1.1\r\nHost: swapd\r\nX-Slow: ")
        while time.monotonic() - start < HEAD_DEADLINE_S:
            try:
                await conn.send(b"a")
            except ConnectionError:
                return True
            if await conn.closed_by_server(0.2):
                return True
            if conn.responses.done:  # a 408 or 400 is as good as a close
                return True
        return False
    finally:
        await conn.close()


async def test_a_head_sent_slowly_is_cut_off(hostile: Hostile) -> None:
    slow = [asyncio.ensure_future(_trickle(hostile.stack)) for _ in range(4)]
    health = await exchange(hostile.stack, request_head("GET /health HTTP/1.1"))
    assert health.statuses == [200]  # others are served meanwhile
    assert await asyncio.gather(*slow) == [True] * 4, "a head trickling on was not cut off"


# ------------------------------------------------------------------------------------------------
# request targets and upgrades


async def test_an_absolute_form_target_is_served(hostile: Hostile) -> None:
    mark = hostile.rec.mark()
    data = post_json(CHAT, {"model": "rec"})
    data = data.replace(f"POST {CHAT}".encode(), f"POST {hostile.stack.url}{CHAT}".encode(), 1)
    got = await exchange(hostile.stack, data)
    assert got.statuses == [200], got
    head = request_head(f"GET {hostile.stack.url}/upstream/rec/abs-form?q=1 HTTP/1.1")
    got = await exchange(hostile.stack, head)
    assert got.statuses == [200], got
    assert json.loads(got.responses[0].body)["raw_path"] == "/abs-form?q=1"
    assert hostile.rec.paths_since(mark) == [CHAT, "/abs-form?q=1"]


async def test_a_post_with_upgrade_websocket_is_a_plain_post(hostile: Hostile) -> None:
    data = post_json(CHAT, {"model": "rec"}, "Connection: Upgrade", "Upgrade: websocket")
    got = await exchange(hostile.stack, data)
    assert got.statuses == [200], got
    assert json.loads(got.responses[0].body)["object"] == "chat.completion"


# ------------------------------------------------------------------------------------------------
# Expect


EXPECTATIONS = {
    "not-utf8": b"\xff",
    "continue-then-not-utf8": b"100-continue\xfe",
    "unknown": b"gzip",
    "continue-and-more": b"100-continue, x-more",
}


def _with_expect(request: bytes, value: bytes) -> bytes:
    head, sep, body = request.partition(b"\r\n\r\n")
    return head + b"\r\nExpect: " + value + sep + body


@pytest.mark.parametrize("value", list(EXPECTATIONS.values()), ids=list(EXPECTATIONS))
@pytest.mark.parametrize("route", ["model", "api"])
async def test_an_expectation_other_than_100_continue_is_417(
    hostile: Hostile, route: str, value: bytes
) -> None:
    """Issue 29, finding 9: a non-UTF-8 byte in `Expect:` was a 500 and an ERROR traceback
    (aiohttp's default expect handler echoes the value into a text body it cannot encode).
    RFC 9110 §10.1.1: a server may answer an expectation it does not meet with 417."""
    logs = ProxyLogs(hostile.stack)
    mark = hostile.rec.mark()
    request = (
        post_json(CHAT, {"model": "rec"})
        if route == "model"
        else request_head("GET /upstream/rec/expect HTTP/1.1")
    )
    got = await exchange(hostile.stack, _with_expect(request, value))
    assert got.statuses == [417] and is_openai_error(got.responses[0], 417), got
    assert hostile.rec.paths_since(mark) == []  # nothing went upstream
    assert logs.server_errors() == []
    # 100-continue is still met, and HTTP/1.0 ignores Expect (RFC 9110 §10.1.1).
    got = await exchange(hostile.stack, _with_expect(request, b"100-Continue"))
    assert got.statuses[-1] == 200, got
    old = request.replace(b" HTTP/1.1\r\n", b" HTTP/1.0\r\n", 1)
    got = await exchange(hostile.stack, _with_expect(old, value))
    assert got.statuses == [200], got
