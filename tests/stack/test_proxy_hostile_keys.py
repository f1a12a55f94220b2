"""Hostile requests to a proxy that requires API keys (issue 9, item 8): ambiguous credentials
are refused on every route, a key inside a malformed header line never reaches a log, and a
bounded fuzz loop of malformed heads gets only 4xx answers or closed connections, never a
server error or a traceback, while /health keeps answering.

The proxy runs at DEBUG here: a key must stay out of the logs at every level, and a client's bad
request is at most one line, not a traceback. `alpha` is tests/support/upstreams/fake_model.py,
standing for llama-server.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from tests.support.hostile import SERVER_ERROR, ProxyLogs, exchange, is_openai_error
from tests.support.malformed_heads import cases
from tests.support.proxy import local_model, model_ports, post_json
from tests.support.stack import Stack

pytestmark = pytest.mark.processes

KEY = f"sk-hostile-{uuid.uuid4().hex}"
AUTH = {"Authorization": f"Bearer {KEY}"}
FUZZ_SEED = 9
FUZZ_CASES = 600
FUZZ_SECONDS = 90.0


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    (port,) = model_ports(1)
    config = {
        "healthCheckTimeout": 15,
        "apiKeys": [KEY],
        "models": {"alpha": local_model("alpha", port)},
    }
    with Stack(config, env={"SWAPD_PROXY_LOG_LEVEL": "DEBUG"}) as running:
        first = post_json("/v1/chat/completions", {"model": "alpha"}, _auth())
        ready = asyncio.run(exchange(running, first, wait=30))
        assert ready.statuses == [200], ready
        yield running


def _bad_requests(stack: Stack) -> int:
    """The proxy's count of requests its HTTP parser rejected (`GET /running`, "proxy")."""
    request = urllib.request.Request(stack.url + "/running", headers=AUTH)
    with urllib.request.urlopen(request, timeout=10) as resp:
        return int(json.load(resp).get("proxy", {}).get("bad_requests", -1))


def _auth(key: str = KEY) -> str:
    return f"Authorization: Bearer {key}"


def _get(path: str, *headers: str) -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/1.1", "Host: swapd", *headers]) + "\r\n\r\n").encode()


REQUESTS = {
    "chat": lambda *h: post_json("/v1/chat/completions", {"model": "alpha"}, *h),
    "upstream": lambda *h: _get("/upstream/alpha/anything", *h),
    "models": lambda *h: _get("/v1/models", *h),
    "running": lambda *h: _get("/running", *h),
}


@pytest.mark.parametrize("route", list(REQUESTS))
@pytest.mark.parametrize("second", [KEY, "wrong-key"], ids=["same-key", "other-key"])
async def test_two_authorization_headers_are_400(stack: Stack, route: str, second: str) -> None:
    for first, then in ((KEY, second), (second, KEY)):
        got = await exchange(stack, REQUESTS[route](_auth(first), _auth(then)))
        assert got.statuses == [400] and is_openai_error(got.responses[0], 400), got
    alone = await exchange(stack, REQUESTS[route](_auth()))
    assert alone.statuses == [200], alone


@pytest.mark.parametrize(
    "line",
    [
        f"Authorization: Bearer {KEY}\x01",
        f"Authorization Bearer {KEY}",
        f"X-Api-Key: {KEY}\x00",
        f"Authorization : Bearer {KEY}",
        f"Authorization: Bearer {KEY}{'x' * 9000}",
    ],
    ids=["control-char", "no-colon", "nul", "space-before-colon", "too-long"],
)
async def test_a_key_in_a_malformed_header_line_never_reaches_a_log(
    stack: Stack, line: str
) -> None:
    logs = ProxyLogs(stack, AUTH)
    got = await exchange(stack, _get("/v1/models", line))
    assert got.closed or (got.statuses and 400 <= got.statuses[0] < 500), got
    health = await exchange(stack, _get("/health"))
    assert health.statuses == [200]
    assert KEY not in logs.new_output(), "the key is in the output of swapd run"
    assert KEY not in logs.new_ring(), "the key is in /logs"
    assert logs.server_errors() == []


async def test_fuzzed_malformed_heads_get_4xx_or_a_close(stack: Stack) -> None:
    logs = ProxyLogs(stack, AUTH)
    deadline = time.monotonic() + FUZZ_SECONDS
    findings = []
    sent = 0
    limit = asyncio.Semaphore(8)

    async def one(name: str, data: bytes) -> None:
        if time.monotonic() > deadline:
            return
        nonlocal sent
        async with limit:
            sent += 1
            got = await exchange(stack, data, wait=10)
        ok = got.closed if not got.responses else 400 <= got.statuses[0] < 500
        if not ok:
            findings.append(f"{name} {data[:80]!r} -> {got.statuses} closed={got.closed}")

    bad_before = _bad_requests(stack)
    batch = cases(FUZZ_SEED, FUZZ_CASES)
    for start in range(0, len(batch), 40):
        await asyncio.gather(*(one(name, data) for name, data in batch[start : start + 40]))
        health = await exchange(stack, _get("/health"), wait=5)
        assert health.statuses == [200], f"/health after {start + 40} fuzzed heads: {health}"
    assert findings == []
    errors = logs.server_errors()
    assert errors == [], f"{len(errors)} error lines, first: {errors[:3]}"
    assert not SERVER_ERROR.search(logs.new_ring())
    # Each was a client's bad request, counted once as one.
    assert _bad_requests(stack) - bad_before == sent
