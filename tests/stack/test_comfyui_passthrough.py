"""A second ComfyUI served through `/upstream/<model>/` with the seed's hand-made settings (its
second config block: `concurrencyLimit: 999`, `compat.ignoreWebsockets: true`, and the three
patterns in `upstream.ignorePaths`), and the ignored-websocket counting rule on a model with a
small `concurrencyLimit`.

It behaves like `/comfyui/` except that `upstream.ignorePaths` matches every method. The container
of the seed's block is the ComfyUI-like upstream here (`comfyui_support.py`); `webui` is the fake
llama-server (it has a `/ws` echo websocket and a slow streaming `/slow`), standing for any web UI
whose websocket should not count."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest

from tests.support.comfyui import (
    ComfyUpstream,
    Running,
    attempt,
    closed,
    free_port_run,
    polling,
)
from tests.support.stack import Stack, fake_model_cmd

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

OTHER = "my-other-comfyui-model"
IGNORED_PATH = f"model {OTHER} is not loaded; path matches upstream.ignorePaths"
IGNORED_WS = f"model {OTHER} is not loaded; ignored websocket requests cannot start it"
TTL = 2
WEBUI_LIMIT = 2


def _config(up: ComfyUpstream) -> str:
    # The seed's second block; `docker run` and `docker stop ${MODEL_ID}` replaced (module doc).
    return f"""
healthCheckTimeout: 15
startPort: {free_port_run(2)}
models:
  {OTHER}:
    checkEndpoint: /
    # the two settings /comfyui/ would have applied for you
    concurrencyLimit: 999
    compat:
      ignoreWebsockets: true
    cmdStop: {up.cmd_stop()}
    cmd: >
      {up.cmd()}
    ttl: {TTL}
  webui:
    cmd: {fake_model_cmd("webui")}
    concurrencyLimit: {WEBUI_LIMIT}
    compat:
      ignoreWebsockets: true

upstream:
  ignorePaths:
    # the same three patterns /comfyui/ applies on its own
    - '.*\\.(js|json|css|png|gif|jpg|jpeg|ico|txt)$'
    - ^\\/ws(\\/|$)
    - ^\\/api\\/jobs$
"""


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    stack = Stack("")
    stack.up = ComfyUpstream(stack.base, OTHER)  # type: ignore[attr-defined]
    stack.write_config(_config(stack.up))  # type: ignore[attr-defined]
    with stack:
        yield stack


async def _stopped(swapd: Running, model: str = OTHER) -> None:
    if await swapd.state(model) != "stopped":
        await swapd.unload(model)


BASE = f"/upstream/{OTHER}"


async def test_ignored_paths_answer_409_for_every_method(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    await _stopped(swapd)
    mark = up.mark()
    rows = [
        ("GET", "/scripts/app.js", False, IGNORED_PATH),
        ("GET", "/templates/default.json?v=2", False, IGNORED_PATH),
        ("GET", "/api/userdata/workflows%2Fmine.json", False, IGNORED_PATH),
        ("GET", "/ws", False, IGNORED_PATH),
        ("GET", "/ws/x", False, IGNORED_PATH),
        ("GET", "/api/jobs", False, IGNORED_PATH),
        # The difference from /comfyui/: ignorePaths matches every method, writes included.
        ("POST", "/api/jobs", False, IGNORED_PATH),
        ("POST", "/scripts/app.js", False, IGNORED_PATH),
        ("DELETE", "/ws", False, IGNORED_PATH),
        # compat.ignoreWebsockets, exactly as on /comfyui/.
        ("GET", "/", True, IGNORED_WS),
        ("GET", "/wsapi", True, IGNORED_WS),
        ("GET", "/ws?clientId=1", True, IGNORED_WS),  # an upgrade: the websocket rule, any path
    ]
    for method, path, websocket, message in rows:
        status, error = await attempt(
            session, swapd.url + BASE + path, method=method, websocket=websocket
        )
        assert (status, error and error["message"]) == (409, message), (method, path)
    assert await swapd.state(OTHER) == "stopped"
    assert up.since(mark) == []


@pytest.mark.parametrize(
    ("method", "path", "upstream_path"),
    [
        ("GET", "/", "/"),
        ("POST", "/api/prompt", "/api/prompt"),
        ("GET", "/wsapi", "/wsapi"),
        ("GET", "/api/jobs/12", "/api/jobs/12"),
    ],
)
async def test_everything_else_starts_it(
    swapd: Running,
    session: aiohttp.ClientSession,
    up: ComfyUpstream,
    method: str,
    path: str,
    upstream_path: str,
) -> None:
    await _stopped(swapd)
    mark = up.mark()
    kwargs = {"json": {"prompt": {}}} if method == "POST" else {}
    async with session.request(method, swapd.url + BASE + path, **kwargs) as resp:
        await resp.read()
    assert up.starts_since(mark) == 1
    assert [(e["method"], e["path"]) for e in up.requests_since(mark)][-1] == (
        method,
        upstream_path,
    )


async def test_redirect_and_a_stale_tab(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    async with session.get(swapd.url + BASE + "?token=t", allow_redirects=False) as resp:
        assert resp.status == 301
        assert resp.headers["Location"] == BASE + "/?token=t"
    async with session.get(swapd.url + BASE + "/") as resp:
        assert resp.status == 200
    ws = await session.ws_connect(swapd.url + BASE + "/ws?clientId=tab")
    assert (await ws.receive_json(timeout=10))["type"] == "status"
    unload = asyncio.ensure_future(swapd.unload(OTHER))
    await closed(ws)
    await asyncio.wait_for(unload, 30)
    mark = up.mark()
    for _ in range(3):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(swapd.url + BASE + "/ws?clientId=tab")
        assert refused.value.status == 409
    assert up.since(mark) == []


async def test_an_idle_tab_through_upstream_does_not_keep_it_loaded(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    """The seed's remedy for a polling tab: serve it through /upstream/ with an ignorePaths entry
    for the polled path. Here the page polls /api/jobs, which the list covers."""
    await _stopped(swapd)
    async with session.get(swapd.url + BASE + "/") as resp:
        assert resp.status == 200
    mark = up.mark()
    ws = await session.ws_connect(swapd.url + BASE + "/ws?clientId=idle")
    await ws.receive_json(timeout=10)
    async with polling(session, swapd.url + BASE + "/api/jobs") as polls:
        await swapd.wait_state(OTHER, "stopped", timeout=TTL + 10)
        await closed(ws)
    assert polls.count(200) >= 3
    assert up.starts_since(mark) == 0


# --------------------------------------------------------------------------------------------------
# Issue item 5: ignored websockets count toward nothing (here with a limit small enough to see it)


async def test_ignored_websockets_take_no_slot_and_do_not_hold_an_unload(
    swapd: Running, session: aiohttp.ClientSession
) -> None:
    await _stopped(swapd, "webui")
    async with session.get(swapd.url + "/upstream/webui/health") as resp:
        assert resp.status == 200
    # More websockets than the limit: every one is accepted and works.
    sockets = [
        await session.ws_connect(swapd.url + f"/upstream/webui/ws?n={i}")
        for i in range(WEBUI_LIMIT * 3)
    ]
    for ws in sockets:
        await ws.receive_json(timeout=10)  # the fake's hello
        await ws.send_str("ping")
        assert (await ws.receive(timeout=10)).data == "echo:ping"

    # The limit still applies to HTTP requests, and the websockets are not part of it.
    async def slow() -> int:
        async with session.get(swapd.url + "/upstream/webui/slow?n=20&delay=0.1") as resp:
            await resp.read()
            return resp.status

    streams = [asyncio.ensure_future(slow()) for _ in range(WEBUI_LIMIT)]
    entry = await _until_in_flight(swapd, WEBUI_LIMIT)
    assert entry["in_flight"] == WEBUI_LIMIT  # not WEBUI_LIMIT + the websockets
    async with session.get(swapd.url + "/upstream/webui/health") as resp:
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "1"
    assert await asyncio.wait_for(asyncio.gather(*streams), 20) == [200] * WEBUI_LIMIT
    await _until_in_flight(swapd, 0)
    # With every websocket still open, an unload goes through at once and closes them.
    unload = asyncio.ensure_future(swapd.unload("webui"))
    for ws in sockets:
        await closed(ws)
    await asyncio.wait_for(unload, 30)


async def _until_in_flight(swapd: Running, count: int) -> dict[str, object]:
    async with asyncio.timeout(15):
        while True:
            entry = await swapd.status("webui")
            if entry["in_flight"] == count:
                return entry
            await asyncio.sleep(0.05)
