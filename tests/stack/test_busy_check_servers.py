"""`busyCheck: llamacpp` and `busyCheck: vllm`, end to end (real swapd, real processes).

`tests/support/upstreams/fake_model.py` stands for llama-server (`--slots`: its `GET /slots`, where
a generation in progress shows `is_processing: true`) and for vLLM (`--metrics`: its Prometheus
`/metrics` with `vllm:num_requests_running`). The long generation is started by another client
straight at the server's port, not through swapd: the case where the proxy sees no request in
flight and only the server knows it is working.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.support.comfyui import Running, free_port_run, until
from tests.support.stack import Stack, fake_model_cmd

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

TTL = 2
LLAMA = "agent"
VLLM = "vllm"
NO_SLOTS = "no-slots"
# A generation of 6 s: three TTLs.
CHUNKS, DELAY = 30, 0.2


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    models = {
        LLAMA: (fake_model_cmd(LLAMA, "--slots", "2"), "llamacpp"),
        NO_SLOTS: (fake_model_cmd(NO_SLOTS), "llamacpp"),  # llama-server without /slots
        VLLM: (fake_model_cmd(VLLM, "--metrics"), "vllm"),
    }
    body = "".join(
        f"  {name}:\n    cmd: {cmd}\n    ttl: {TTL}\n    busyCheck: {preset}\n"
        for name, (cmd, preset) in models.items()
    )
    stack = Stack(f"startPort: {free_port_run(3)}\nmodels:\n{body}")
    with stack:
        yield stack


@pytest.fixture
def swapd(stack: Stack) -> Running:
    return Running(stack)


async def _start(swapd: Running, session: aiohttp.ClientSession, model: str) -> dict[str, Any]:
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    async with session.post(swapd.url + "/v1/chat/completions", json=chat) as resp:
        assert resp.status == 200
    return await swapd.wait_state(model, "ready")


async def _generate_directly(session: aiohttp.ClientSession, port: int) -> tuple[int, float]:
    """Another client's long generation, at the server itself; (chunks received, end time)."""
    url = f"http://127.0.0.1:{port}/slow?n={CHUNKS}&delay={DELAY}"
    received = 0
    async with session.get(url) as resp:
        async for _line in resp.content:
            received += 1
    return received, time.time()


async def _busy_message(swapd: Running, model: str) -> str | None:
    busy = (await swapd.status(model)).get("busy")
    return busy["message"] if busy and busy["busy"] else None


@pytest.mark.parametrize(
    ("model", "says"),
    [
        (LLAMA, "busy (upstream reports 1 processing slot)"),
        (VLLM, "busy (upstream reports 1 running request)"),
    ],
)
async def test_a_generation_the_proxy_never_saw_holds_the_ttl(
    swapd: Running, session: aiohttp.ClientSession, model: str, says: str
) -> None:
    entry = await _start(swapd, session, model)
    generating = asyncio.ensure_future(_generate_directly(session, entry["port"]))
    assert await until(lambda: _busy_message(swapd, model), 10, "busy") == says
    assert (await swapd.status(model))["in_flight"] == 0  # swapd's proxy has nothing in flight
    received, ended = await asyncio.wait_for(generating, 30)
    assert received == CHUNKS  # never cut: the model stayed loaded past three TTLs
    assert (await swapd.status(model))["pid"] == entry["pid"]
    stopped = await swapd.wait_state(model, "stopped", timeout=TTL + 15)
    assert stopped["since"] - ended >= TTL


async def test_a_check_that_fails_counts_as_idle(
    swapd: Running, session: aiohttp.ClientSession
) -> None:
    entry = await _start(swapd, session, NO_SLOTS)
    generating = asyncio.ensure_future(_generate_directly(session, entry["port"]))
    busy = await until(lambda: _failing(swapd), 10, "the failed check")
    assert busy["busy"] is False and "HTTP 501" in busy["error"]
    assert busy["message"].startswith("idle (busy check failed: GET ")
    # Counted as idle: the TTL stops it while the generation still runs. (The server shuts down
    # gracefully, so the generation itself still ends before the process exits.)
    await until(
        lambda: _left_ready(swapd),
        TTL + 10,
        "the TTL to stop it",
    )
    assert not generating.done()
    await swapd.wait_state(NO_SLOTS, "stopped", timeout=15)
    await asyncio.wait_for(generating, 30)


async def _failing(swapd: Running) -> dict[str, Any] | None:
    busy = (await swapd.status(NO_SLOTS)).get("busy")
    return busy if busy and busy["error"] else None


async def _left_ready(swapd: Running) -> bool:
    return await swapd.state(NO_SLOTS) in ("draining", "stopping", "stopped")
