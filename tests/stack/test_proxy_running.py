"""`/running` and the access log against the real stack: `ttl_left` counts down while a model
idles and agrees with `swapd status`; every request gets one access line in the proxy's log
stream (`/logs/stream/proxy`), with its model and status and without its key or query."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable

import aiohttp
import pytest

from tests.support.proxy import local_model
from tests.support.stack import Stack, free_port

pytestmark = pytest.mark.processes

KEY = "sk-access-log-secret-4242"
AUTH = {"Authorization": f"Bearer {KEY}"}


async def _running(session: aiohttp.ClientSession, stack: Stack) -> dict[str, dict[str, object]]:
    async with session.get(stack.url + "/running", headers=AUTH) as resp:
        assert resp.status == 200
        return {m["model"]: m for m in (await resp.json())["running"]}


async def test_ttl_left_counts_down_and_agrees_with_swapd_status(
    stack_factory: Callable[..., Stack], session: aiohttp.ClientSession
) -> None:
    stack = stack_factory(
        {"apiKeys": [KEY], "models": {"alpha": local_model("alpha", free_port(), ttl=60)}}
    )
    async with session.post(
        stack.url + "/v1/chat/completions", json={"model": "alpha"}, headers=AUTH
    ) as resp:
        assert resp.status == 200
    # In use (no TTL running) until the daemon hears the model went idle: the proxy tells that
    # edge once it stayed idle IDLE_EDGE_S (ipc/timings.py). Poll, with a deadline.
    deadline = time.monotonic() + 10
    while (first := (await _running(session, stack))["alpha"]["ttl_left"]) is None:
        assert time.monotonic() < deadline, "alpha still counted in use"
    assert isinstance(first, float) and 50 < first <= 60
    # Idle, the TTL runs out: a later look shows less left (poll; no fixed sleep).
    deadline = time.monotonic() + 10
    while True:
        later = (await _running(session, stack))["alpha"]["ttl_left"]
        assert isinstance(later, float)
        if later <= first - 1 or time.monotonic() > deadline:
            break
    assert later <= first - 1
    status = stack.model("alpha")["ttl_left"]
    after = (await _running(session, stack))["alpha"]["ttl_left"]
    assert isinstance(after, float)
    assert after <= status + 0.5 and status <= later + 0.5  # the same clock, read in order


async def test_one_access_line_per_request_without_keys_or_queries(
    stack_factory: Callable[..., Stack], session: aiohttp.ClientSession
) -> None:
    stack = stack_factory(
        {"apiKeys": [KEY], "models": {"alpha": local_model("alpha", free_port())}}
    )
    async with session.get(stack.url + "/logs/stream/proxy", headers=AUTH) as stream:
        assert stream.status == 200
        tag = "tag-" + str(time.monotonic_ns())
        async with session.post(
            stack.url + f"/v1/chat/completions?token={tag}", json={"model": "alpha"}, headers=AUTH
        ) as resp:
            assert resp.status == 200
        forged = "2026-01-01 00:00:00 [INFO] forged"
        async with session.post(
            stack.url + "/v1/completions", json={"model": f"evil\n{forged}"}, headers=AUTH
        ) as resp:
            assert resp.status == 404
        async with session.get(stack.url + "/upstream/nosuch/x", headers=AUTH) as resp:
            assert resp.status == 404
        seen = ""
        async with asyncio.timeout(20):
            while seen.count('"GET /upstream/nosuch/x"') < 1:
                seen += (await stream.content.readany()).decode()
    chat = [line for line in seen.splitlines() if '"POST /v1/chat/completions"' in line]
    assert len(chat) == 1
    assert " 200 " in chat[0] and "model=alpha" in chat[0] and "waited=" in chat[0]
    (refused,) = [line for line in seen.splitlines() if '"GET /upstream/nosuch/x"' in line]
    assert " 404 " in refused and "model=-" in refused
    assert KEY not in seen and tag not in seen
    # A model name from the body is one line whatever it holds (escaped, never a line of its own).
    (evil,) = [line for line in seen.splitlines() if '"POST /v1/completions"' in line]
    assert "model='evil\\n2026-01-01" in evil
    assert not any(line.startswith(forged) for line in seen.splitlines())
    # The stream's lines are the `/logs` ring's form: `[stamp] [INFO] message`.
    assert re.match(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] \[INFO\] 127\.0\.0\.1 ", chat[0])
