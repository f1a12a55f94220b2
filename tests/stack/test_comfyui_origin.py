"""ComfyUI's Origin check through swapd (issue 9, item 4): the browser's Host and Origin reach
ComfyUI unchanged, with X-Forwarded-For/-Proto/-Host added, so the page, its module script and
CSS, its fetch POSTs and its websocket, which all carry an Origin, are served through `/comfyui/`
and through `/upstream/<model>/`.

The ComfyUI-like upstream (tests/support/upstreams/comfyui_like.py, standing for the seed page's
ComfyUI container, see `comfyui_support.py`) answers 403 as ComfyUI does when an Origin's host:port
differs from the Host it receives (the stand-in's own tests below show it refuses what ComfyUI
refuses); swapd refuses another site's Origin before it gets there, and what the upstream logged
shows what arrived.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.support.comfyui import (
    COMFYUI_LIKE,
    MODEL,
    ComfyUpstream,
    comfyui_model_yaml,
    free_port_run,
)
from tests.support.stack import PYTHON, Stack, free_port, http_get, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

OTHER = "comfy-up"


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    stack = Stack("")
    comfy = ComfyUpstream(stack.base, MODEL)
    other = ComfyUpstream(stack.base, OTHER)
    stack.ups = {"/comfyui": comfy, f"/upstream/{OTHER}": other}  # type: ignore[attr-defined]
    stack.write_config(
        f"""
healthCheckTimeout: 15
startPort: {free_port_run(2)}
models:
{comfyui_model_yaml(comfy)}
  {OTHER}:
    checkEndpoint: /
    concurrencyLimit: 999
    cmdStop: {other.cmd_stop()}
    cmd: >
      {other.cmd()}
"""
    )
    with stack:
        yield stack


PREFIXES = ["/comfyui", f"/upstream/{OTHER}"]


def _origin(stack: Stack) -> str:
    """What a browser that opened the page from swapd sends: swapd's own scheme://host:port."""
    return stack.url


def _last_request(up: ComfyUpstream, mark: int, path: str) -> dict[str, Any]:
    found = [e for e in up.requests_since(mark) if e["path"] == path]
    assert found, f"{path} never reached the upstream: {up.since(mark)}"
    return found[-1]


@pytest.mark.parametrize("prefix", PREFIXES)
async def test_the_page_its_assets_and_a_fetch_post_with_an_origin_are_served(
    stack: Stack, session: aiohttp.ClientSession, prefix: str
) -> None:
    up: ComfyUpstream = stack.ups[prefix]  # type: ignore[attr-defined]
    base = stack.url + prefix
    async with session.get(base + "/") as resp:  # a navigation: no Origin
        assert resp.status == 200 and "ComfyUI" in await resp.text()
    origin = {"Origin": _origin(stack)}
    for asset in ("/scripts/app.js", "/style.css"):  # <script type=module>, crossorigin CSS
        async with session.get(base + asset, headers=origin) as resp:
            assert resp.status == 200, (asset, resp.status)
    mark = up.mark()
    body = {"prompt": {}, "client_id": "tab-1"}
    async with session.post(base + "/api/prompt", json=body, headers=origin) as resp:
        assert resp.status == 200, await resp.text()
        assert "prompt_id" in await resp.json()
    arrived = _last_request(up, mark, "/api/prompt")["headers"]
    assert arrived["Host"] == stack.url.removeprefix("http://")
    assert arrived["Origin"] == _origin(stack)


@pytest.mark.parametrize("prefix", PREFIXES)
async def test_the_websocket_with_an_origin_is_served(
    stack: Stack, session: aiohttp.ClientSession, prefix: str
) -> None:
    up: ComfyUpstream = stack.ups[prefix]  # type: ignore[attr-defined]
    async with session.get(stack.url + prefix + "/") as resp:
        assert resp.status == 200
    mark = up.mark()
    url = stack.url + prefix + "/ws?clientId=tab-ws"
    async with session.ws_connect(url, origin=_origin(stack)) as ws:
        message = await ws.receive_json(timeout=10)
        assert message["type"] == "status"
    handshake = _last_request(up, mark, "/ws")["headers"]
    assert handshake["Host"] == stack.url.removeprefix("http://")
    assert handshake["Origin"] == _origin(stack)
    assert handshake["X-Forwarded-For"] == "127.0.0.1"
    assert handshake["X-Forwarded-Host"] == stack.url.removeprefix("http://")


@pytest.mark.parametrize("prefix", PREFIXES)
async def test_another_sites_origin_is_refused_before_comfyui(
    stack: Stack, session: aiohttp.ClientSession, prefix: str
) -> None:
    """swapd refuses another site's page itself (issue 29: no web page drives a local swapd,
    proxy/origin_check.py), so ComfyUI never sees it: its model is not started for it either."""
    up: ComfyUpstream = stack.ups[prefix]  # type: ignore[attr-defined]
    async with session.get(stack.url + prefix + "/") as resp:
        assert resp.status == 200
    mark = up.mark()
    evil = {"Origin": "http://127.0.0.1:1"}
    async with session.post(stack.url + prefix + "/api/prompt", json={}, headers=evil) as resp:
        assert resp.status == 403
        assert (await resp.json())["error"]["code"] == "cross_origin"
    # (A websocket of an earlier test may still log its close meanwhile.)
    assert [e for e in up.since(mark) if e.get("path") == "/api/prompt"] == []


@pytest.mark.parametrize("prefix", PREFIXES)
async def test_forwarded_headers_reach_comfyui(
    stack: Stack, session: aiohttp.ClientSession, prefix: str
) -> None:
    up: ComfyUpstream = stack.ups[prefix]  # type: ignore[attr-defined]
    mark = up.mark()
    async with session.get(stack.url + prefix + "/api/system_stats") as resp:
        assert resp.status == 200
    arrived = _last_request(up, mark, "/api/system_stats")["headers"]
    assert arrived["Host"] == stack.url.removeprefix("http://")
    assert arrived["X-Forwarded-For"] == "127.0.0.1"
    assert arrived["X-Forwarded-Proto"] == "http"
    assert arrived["X-Forwarded-Host"] == stack.url.removeprefix("http://")


@pytest.mark.parametrize("prefix", PREFIXES)
async def test_forwarded_headers_the_client_sent_are_extended_or_replaced(
    stack: Stack, session: aiohttp.ClientSession, prefix: str
) -> None:
    up: ComfyUpstream = stack.ups[prefix]  # type: ignore[attr-defined]
    mark = up.mark()
    sent = {
        "X-Forwarded-For": "10.0.0.7",
        "X-Forwarded-Host": "spoofed.example",
        "X-Forwarded-Proto": "https",
    }
    async with session.get(stack.url + prefix + "/api/system_stats", headers=sent) as resp:
        assert resp.status == 200
    arrived = _last_request(up, mark, "/api/system_stats")["headers"]
    # As Go's reverse proxy does: this hop appended to the chain, the rest describe this hop.
    assert arrived["X-Forwarded-For"] == "10.0.0.7, 127.0.0.1"
    assert arrived["X-Forwarded-Host"] == stack.url.removeprefix("http://")
    assert arrived["X-Forwarded-Proto"] == "http"


# ------------------------------------------------------------------------------------------------
# the stand-in itself: it refuses what ComfyUI refuses


@pytest.fixture(scope="module")
def bare_comfyui() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, str(COMFYUI_LIKE), "--port", str(port), "--name", "bare"],
        stdout=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: http_get(url + "/", 1.0)[0] == 200, 15, what="comfyui-like up")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize(
    ("host", "origin", "status"),
    [
        ("127.0.0.1:{port}", "http://127.0.0.1:{port}", 200),
        ("localhost:{port}", "http://127.0.0.1:{port}", 403),  # what a Host rewrite does
        ("127.0.0.1:{port}", "http://127.0.0.1:1", 403),
        ("127.0.0.1:{port}", "http://127.0.0.1", 200),  # no port: host names compared
        ("comfy.example:443", "https://other.example", 200),  # not a loopback Host: unchecked
    ],
)
async def test_the_stand_in_checks_origin_as_comfyui_does(
    bare_comfyui: str, session: aiohttp.ClientSession, host: str, origin: str, status: int
) -> None:
    port = bare_comfyui.rsplit(":", 1)[1]
    headers = {"Host": host.format(port=port), "Origin": origin.format(port=port)}
    async with session.post(bare_comfyui + "/api/prompt", json={}, headers=headers) as resp:
        assert resp.status == status
        if status == 200:
            assert "prompt_id" in json.loads(await resp.text())
