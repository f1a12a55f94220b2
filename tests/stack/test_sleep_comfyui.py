"""`comfyui_auto` with the ComfyUI sleep preset, end to end: real swapd, the ComfyUI-like upstream
for the container (its `/free`, and the GPU memory its models take, reported through the fake GPU
backend as NVML would).

Asleep, the server keeps serving an open tab: its page, assets, websocket and GET polls reach it
without waking it (and the tab's websocket stays open across the sleep, so the reload loop of an
idle tab that docs/guides/comfyui.md describes does not start); a job (a POST) wakes it, in the
same process. Without the setting the seed's rules hold exactly (test_comfyui_*.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import aiohttp
import pytest

from swapd.daemon.machinery.gpu_fake import fake_uuid
from tests.support.comfyui import (
    MODEL,
    WS_HEADERS,
    ComfyUpstream,
    Running,
    comfyui_model_yaml,
    free_port_run,
    until,
)
from tests.support.sleeping import GIB, MIB, gpu_env
from tests.support.stack import Stack

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

GPU = fake_uuid(0).casefold()


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    stack = Stack("", env=gpu_env())
    up = ComfyUpstream(stack.base, MODEL)
    stack.up = up  # type: ignore[attr-defined]
    extra = "    sleep: comfyui\n    gpus: [0]\n"
    comfy = comfyui_model_yaml(up, extra=extra, job_steps=3, step_delay=0.05)
    comfy = comfy.replace("--step-delay 0.05", f"--step-delay 0.05 --gpu-mem {6 * GIB}")
    stack.write_config(f"healthCheckTimeout: 15\nstartPort: {free_port_run(1)}\nmodels:\n{comfy}")
    with stack:
        yield stack


async def _job(session: aiohttp.ClientSession, url: str, up: ComfyUpstream) -> None:
    mark = up.mark()
    body = {"prompt": {"9": {"class_type": "SaveImage"}}, "client_id": "tab"}
    async with session.post(url + "/comfyui/api/prompt", json=body) as resp:
        assert resp.status == 200, await resp.text()
    await until(
        lambda: any(e["event"] == "job_done" for e in up.since(mark)), what="the job to finish"
    )


async def _status_messages(ws: aiohttp.ClientWebSocketResponse, count: int) -> int:
    """Read until `count` status messages came (the server sends one every 0.2 s)."""
    seen = 0
    async with asyncio.timeout(20):
        while seen < count:
            msg = await ws.receive()
            assert msg.type == aiohttp.WSMsgType.TEXT, msg
            if json.loads(msg.data).get("type") == "status":
                seen += 1
    return seen


async def test_an_open_tab_is_served_asleep_without_waking_it_and_a_job_wakes_it(
    stack: Stack,
) -> None:
    swapd = Running(stack)
    up: ComfyUpstream = stack.up  # type: ignore[attr-defined]
    async with aiohttp.ClientSession() as session:
        async with session.get(swapd.url + "/comfyui/") as resp:
            assert resp.status == 200
        pid = int((await swapd.wait_state(MODEL, "ready"))["pid"])
        ws = await session.ws_connect(swapd.url + "/comfyui/ws?clientId=tab")
        try:
            await _status_messages(ws, 1)
            await _job(session, swapd.url, up)  # its models go onto the GPU: 6 GiB
            async with session.post(swapd.url + f"/api/models/sleep/{MODEL}") as resp:
                assert resp.status == 200, await resp.text()
            asleep = await swapd.status(MODEL)
            assert asleep["state"] == "asleep" and asleep["pid"] == pid
            assert asleep["sleep"]["held_before"] == {GPU: 6 * GIB}
            assert asleep["sleep"]["residual"] == {GPU: 256 * MIB}  # ComfyUI freed its models
            frees = [e for e in up.events() if e["event"] == "free"]
            assert [e["body"] for e in frees] == [{"unload_models": True, "free_memory": True}]

            # The tab, asleep: its websocket stays open and the server's messages keep coming;
            # the page, an asset, the polls (ignored or not) and a new websocket are all served.
            mark = up.mark()
            assert await _status_messages(ws, 2) == 2
            for path in ("/comfyui/", "/comfyui/scripts/app.js", "/comfyui/api/jobs",
                         "/comfyui/api/queue", "/comfyui/api/system_stats"):  # fmt: skip
                async with session.get(swapd.url + path) as resp:
                    assert resp.status == 200, (path, await resp.text())
            second = await session.ws_connect(swapd.url + "/comfyui/ws?clientId=tab2")
            await _status_messages(second, 1)
            await second.close()
            still = await swapd.status(MODEL)
            assert still["state"] == "asleep" and still["pid"] == pid
            assert still["sleep"]["wakes"] == 0
            reached = {e["path"] for e in up.requests_since(mark)}
            assert {"/", "/scripts/app.js", "/api/jobs", "/api/queue", "/ws"} <= reached
            assert up.starts_since(mark) == 0

            # A job wakes it: the same process, and the job runs.
            await _job(session, swapd.url, up)
            awake = await swapd.status(MODEL)
            assert awake["state"] == "ready" and awake["pid"] == pid
            assert awake["sleep"]["wakes"] == 1
            assert not ws.closed  # the tab never lost its websocket
        finally:
            await ws.close()


async def test_a_websocket_upgrade_headers_alone_do_not_wake_it(stack: Stack) -> None:
    """The upgrade rule is on the handshake, whatever the path (the seed's websocket rule)."""
    swapd = Running(stack)
    async with aiohttp.ClientSession() as session:
        if await swapd.state(MODEL) != "ready":
            async with session.get(swapd.url + "/comfyui/") as resp:
                assert resp.status == 200
            await swapd.wait_state(MODEL, "ready")
        async with session.post(swapd.url + f"/api/models/sleep/{MODEL}") as resp:
            assert resp.status == 200, await resp.text()
        async with session.get(
            swapd.url + "/comfyui/wsapi", headers=WS_HEADERS, allow_redirects=False
        ) as resp:
            # Relayed to the asleep server (which has no websocket there: its 404), not woken.
            assert resp.status == 404
        assert await swapd.state(MODEL) == "asleep"
