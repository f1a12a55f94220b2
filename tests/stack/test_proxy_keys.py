"""API keys on every route kind, against the real stack."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import aiohttp
import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack

pytestmark = pytest.mark.processes

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    (port,) = model_ports(1)
    config = {
        "healthCheckTimeout": 15,
        "apiKeys": ["other-key", KEY],
        "models": {"alpha": local_model("alpha", port)},
    }
    with Stack(config) as running:
        yield running


def _basic(password: str) -> str:
    return "Basic " + base64.b64encode(f"anyone:{password}".encode()).decode()


GOOD = [
    {"Authorization": f"Bearer {KEY}"},
    {"authorization": f"bearer {KEY}"},
    {"x-api-key": KEY},
    {"Authorization": _basic(KEY)},
]
BAD = [
    {},
    {"Authorization": "Bearer wrong"},
    {"x-api-key": KEY[:-1]},
    {"Authorization": _basic("wrong")},
    {"Authorization": "Basic !!notbase64"},
]
ROUTES = [
    ("POST", "/v1/chat/completions", {"model": "alpha"}),
    ("GET", "/v1/models", None),
    ("GET", "/models", None),
    ("GET", "/upstream/alpha/anything", None),
    ("GET", "/running", None),
    ("GET", "/logs", None),
    ("POST", "/api/models/unload/alpha", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
async def test_every_route_needs_a_key(stack: Stack, method: str, path: str, body: object) -> None:
    async with aiohttp.ClientSession() as session:
        for headers in BAD:
            async with session.request(method, stack.url + path, json=body, headers=headers) as r:
                assert r.status == 401, (path, headers)
                assert r.headers["WWW-Authenticate"].startswith("Basic")
                error = (await r.json())["error"]
                assert error["code"] == "unauthorized"
                assert KEY not in error["message"]
        for headers in GOOD:
            async with session.request(method, stack.url + path, json=body, headers=headers) as r:
                assert r.status == 200, (path, headers, await r.text())


async def test_websockets_and_comfyui_need_a_key(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(stack.url + "/upstream/alpha/ws")
        assert refused.value.status == 401
        async with session.ws_connect(
            stack.url + "/upstream/alpha/ws", headers={"x-api-key": KEY}
        ) as ws:
            assert "hello" in (await ws.receive(timeout=10)).data
        async with session.get(stack.url + "/comfyui/") as resp:
            assert resp.status == 401


async def test_health_and_preflight_are_open(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(stack.url + "/health") as resp:
            assert resp.status == 200
        async with session.options(stack.url + "/v1/chat/completions") as resp:
            assert resp.status == 204


def test_keys_never_reach_the_logs(stack: Stack) -> None:
    assert KEY not in stack.output()
    for path in stack.log_dir.glob("*"):
        assert KEY not in path.read_text(errors="replace")
