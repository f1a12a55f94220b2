"""`/comfyui/` only serves a LOCAL model whose id is exactly `comfyui_auto` (seed: "404 local model
comfyui_auto not found"): not an alias of another model, not a model on a peer. Both configs below
are otherwise valid, and `/upstream/` reaches the same servers, which shows the 404 is the rule and
not a broken setup. The first config also shows that `upstream.ignorePaths` replaces the default
list (it has no static-asset pattern) and matches every method; the second also holds the seed's
"ComfyUI never becomes ready" row (a ComfyUI model left on the default `checkEndpoint`)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator

import aiohttp
import pytest

from tests.support.comfyui import (
    COMFYUI_LIKE,
    MODEL,
    NOT_FOUND,
    ComfyUpstream,
    attempt,
    comfyui_model_yaml,
    free_port_run,
)
from tests.support.stack import PYTHON, Stack, free_port, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.timeout(150)]

NOT_FOUND_REQUESTS = [
    ("GET", "/comfyui/", False),
    ("GET", "/comfyui/scripts/app.js", False),
    ("POST", "/comfyui/api/prompt", False),
    ("GET", "/comfyui/ws", True),
]


# --------------------------------------------------------------------------------------------------
# comfyui_auto only as an alias


@pytest.fixture(scope="module")
def alias_stack() -> Iterator[Stack]:
    stack = Stack("")
    up = ComfyUpstream(stack.base, "comfy")
    stack.up = up  # type: ignore[attr-defined]
    comfy = comfyui_model_yaml(up, extra="    aliases: [comfyui_auto]\n")
    stack.write_config(
        f"""
healthCheckTimeout: 15
startPort: {free_port_run(1)}
upstream:
  ignorePaths:
    - ^/api/jobs$
models:
{comfy}"""
    )
    with stack:
        yield stack


async def test_an_alias_named_comfyui_auto_is_not_used(
    alias_stack: Stack, session: aiohttp.ClientSession
) -> None:
    up: ComfyUpstream = alias_stack.up  # type: ignore[attr-defined]
    for method, path, websocket in NOT_FOUND_REQUESTS:
        status, error = await attempt(
            session, alias_stack.url + path, method=method, websocket=websocket
        )
        assert (status, error and error["message"]) == (404, NOT_FOUND), path
    assert up.events() == []
    assert alias_stack.model("comfy")["state"] == "stopped"
    # The alias itself is fine: /upstream/ looks up aliases and starts the model through it.
    async with session.get(alias_stack.url + f"/upstream/{MODEL}/") as resp:
        assert resp.status == 200
        assert "ComfyUI" in await resp.text()
    assert alias_stack.model("comfy")["state"] == "ready"
    # Loaded or not, /comfyui/ still does not look at aliases.
    status, error = await attempt(session, alias_stack.url + "/comfyui/")
    assert (status, error and error["message"]) == (404, NOT_FOUND)


async def test_user_ignore_paths_replace_the_default_and_match_every_method(
    alias_stack: Stack, session: aiohttp.ClientSession
) -> None:
    up: ComfyUpstream = alias_stack.up  # type: ignore[attr-defined]
    await asyncio.to_thread(alias_stack.swapd, "unload", "comfy")
    await asyncio.to_thread(alias_stack.wait_state, "comfy", "stopped")
    mark = up.mark()
    expected = "model comfy is not loaded; path matches upstream.ignorePaths"
    for method in ("GET", "POST", "DELETE"):
        status, error = await attempt(
            session, alias_stack.url + "/upstream/comfy/api/jobs", method=method
        )
        assert (status, error and error["message"]) == (409, expected), method
    assert up.since(mark) == []
    # The list has no static-asset pattern, so a script no longer counts as ignored: it loads.
    async with session.get(alias_stack.url + "/upstream/comfy/scripts/app.js") as resp:
        assert resp.status == 200
    assert up.starts_since(mark) == 1


# --------------------------------------------------------------------------------------------------
# comfyui_auto only on a peer


@pytest.fixture(scope="module")
def peer_stack() -> Iterator[Stack]:
    stack = Stack("")
    port = free_port()
    log = stack.base / "peer.requests.jsonl"
    peer = subprocess.Popen(
        [PYTHON, str(COMFYUI_LIKE), "--port", str(port), "--request-log", str(log)],
        stdout=subprocess.DEVNULL,
    )
    stack.peer_log = log  # type: ignore[attr-defined]
    nohealth = ComfyUpstream(stack.base, "nohealth")
    stack.nohealth = nohealth  # type: ignore[attr-defined]
    stack.write_config(
        f"""
healthCheckTimeout: 15
startPort: {free_port_run(1)}
models:
  nohealth:
    # the seed's block without `checkEndpoint: /`
    cmd: {nohealth.cmd()}
    cmdStop: {nohealth.cmd_stop()}
peers:
  studio:
    proxy: http://127.0.0.1:{port}
    models: [comfyui_auto]
"""
    )
    try:
        wait_for(log.exists, 10, what="the peer's ComfyUI to start")
        yield stack.start()
    finally:
        try:
            stack.close()
        finally:
            peer.kill()
            peer.wait()


async def test_comfyui_auto_on_a_peer_is_not_used(
    peer_stack: Stack, session: aiohttp.ClientSession
) -> None:
    log = peer_stack.peer_log  # type: ignore[attr-defined]

    def requests() -> list[str]:
        return [line for line in log.read_text().splitlines() if '"request"' in line]

    before = len(requests())
    for method, path, websocket in NOT_FOUND_REQUESTS:
        status, error = await attempt(
            session, peer_stack.url + path, method=method, websocket=websocket
        )
        assert (status, error and error["message"]) == (404, NOT_FOUND), path
    assert len(requests()) == before
    # The peer is reachable and serves that model through the general passthrough.
    async with session.get(peer_stack.url + f"/upstream/{MODEL}/") as resp:
        assert resp.status == 200
        assert "ComfyUI" in await resp.text()
    assert len(requests()) == before + 1


# --------------------------------------------------------------------------------------------------
# "ComfyUI never becomes ready": the default checkEndpoint is /health, which ComfyUI does not serve


async def test_without_check_endpoint_comfyui_never_becomes_ready(
    peer_stack: Stack, session: aiohttp.ClientSession
) -> None:
    up: ComfyUpstream = peer_stack.nohealth  # type: ignore[attr-defined]
    async with session.get(peer_stack.url + "/upstream/nohealth/") as resp:
        assert resp.status == 504
        message = (await resp.json())["error"]["message"]
    assert message.startswith("model nohealth health check timed out after 15s (http://")
    assert message.endswith("/health never answered 200)")
    polled = [e["path"] for e in up.events() if e["event"] == "request"]
    assert polled and set(polled) == {"/health"}  # ComfyUI answered each poll with 404
    state = await asyncio.to_thread(peer_stack.model, "nohealth")
    assert state["state"] == "failed"
