"""API keys on `/comfyui/` apply exactly as on every other endpoint, websockets included: no key or
a wrong one is a 401 before any other rule (so no 409, no start), and each of the three ways of
sending a key works. Real swapd, ComfyUI-like upstream for the container."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator

import aiohttp
import pytest

from tests.support.comfyui import (
    IGNORED_WS,
    MODEL,
    WS_HEADERS,
    ComfyUpstream,
    attempt,
    comfyui_model_yaml,
    free_port_run,
)
from tests.support.stack import Stack

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]

KEY = "sk-comfy-1234"
UNAUTHORIZED = "unauthorized: invalid or missing API key"
GOOD = [
    {"Authorization": f"Bearer {KEY}"},
    {"x-api-key": KEY},
]
BAD = [
    {},
    {"Authorization": "Bearer sk-wrong"},
    {"x-api-key": "sk-wrong"},
]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    stack = Stack("")
    up = ComfyUpstream(stack.base, MODEL)
    stack.up = up  # type: ignore[attr-defined]
    comfy = comfyui_model_yaml(up)
    stack.write_config(
        f"healthCheckTimeout: 15\nstartPort: {free_port_run(1)}\n"
        f"apiKeys: ['{KEY}']\nmodels:\n{comfy}"
    )
    with stack:
        yield stack


async def _unload(stack: Stack) -> None:
    await asyncio.to_thread(stack.swapd, "unload", MODEL)
    await asyncio.to_thread(stack.wait_state, MODEL, "stopped")


async def test_without_a_valid_key_every_comfyui_request_is_401_and_starts_nothing(
    stack: Stack, session: aiohttp.ClientSession
) -> None:
    up: ComfyUpstream = stack.up  # type: ignore[attr-defined]
    await _unload(stack)
    mark = up.mark()
    for headers in BAD:
        for method, path, websocket in [
            ("GET", "/comfyui", False),
            ("GET", "/comfyui/", False),
            ("POST", "/comfyui/api/prompt", False),
            ("GET", "/comfyui/api/jobs", False),  # would be a 409 with a key
            ("GET", "/comfyui/ws", True),  # would be a 409 with a key
        ]:
            async with session.request(
                method,
                stack.url + path,
                headers={**headers, **(WS_HEADERS if websocket else {})},
                allow_redirects=False,
            ) as resp:
                assert resp.status == 401, (headers, path)
                assert resp.headers["WWW-Authenticate"].startswith("Basic")
                assert (await resp.json())["error"]["message"] == UNAUTHORIZED
    assert up.since(mark) == []


async def test_each_way_of_sending_the_key_works_websockets_included(
    stack: Stack, session: aiohttp.ClientSession
) -> None:
    up: ComfyUpstream = stack.up  # type: ignore[attr-defined]
    basic = {"Authorization": "Basic " + base64.b64encode(f"anyone:{KEY}".encode()).decode()}
    # With a key the ordinary rules apply: a websocket cannot start the model.
    await _unload(stack)
    status, error = await attempt(session, stack.url + "/comfyui/", websocket=True, headers=GOOD[0])
    assert (status, error and error["message"]) == (409, IGNORED_WS)
    async with session.get(
        stack.url + "/comfyui?x=1", headers=basic, allow_redirects=False
    ) as resp:
        assert resp.status == 301
    for headers in GOOD:
        await _unload(stack)
        mark = up.mark()
        async with session.get(stack.url + "/comfyui/", headers=headers) as resp:
            assert resp.status == 200
        assert up.starts_since(mark) == 1
    await _unload(stack)
    async with session.get(stack.url + "/comfyui/", headers=basic) as resp:
        assert resp.status == 200
    for headers in [basic, *GOOD]:
        ws = await session.ws_connect(stack.url + "/comfyui/ws?clientId=k", headers=headers)
        assert (await ws.receive_json(timeout=10))["type"] == "status"
        await ws.close()
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await session.ws_connect(stack.url + "/comfyui/ws")
    assert refused.value.status == 401
