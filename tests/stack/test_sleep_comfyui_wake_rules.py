"""Issue 37 items 4 and 5, end to end: real swapd, the ComfyUI-like upstream for `comfyui_auto`
with the `comfyui` sleep preset, and a plain model beside it on the same GPU.

Only real work wakes it: asleep, a settings change and a saved workflow (POSTs that need no GPU)
are served by its asleep server without waking it, so the model that took the GPU stays loaded;
a job (`POST /api/prompt`) wakes it. An open tab keeps it asleep, not stopped: with
`stopAfter`, an asleep ComfyUI whose websocket is open is not stopped, and is once the socket
closes (so the idle tab's reload loop of docs/guides/comfyui.md cannot start). Without a sleep
setting the seed's rules hold exactly (test_comfyui_*.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.support.comfyui import (
    MODEL,
    ComfyUpstream,
    Running,
    comfyui_model_yaml,
    free_port_run,
    until,
)
from tests.support.daemon import chat
from tests.support.sleeping import GIB, gpu_env
from tests.support.stack import Stack, fake_model_cmd

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

STOP_AFTER = 2


def _other() -> str:
    return f"""
  other:
    cmd: {fake_model_cmd("other")}
    proxy: http://127.0.0.1:${{PORT}}
    unloadTimeout: 3
    gpus: [0]
"""


def _stack(sleep: str) -> Stack:
    stack = Stack("", env=gpu_env())
    up = ComfyUpstream(stack.base, MODEL)
    stack.up = up  # type: ignore[attr-defined]
    comfy = comfyui_model_yaml(up, extra=f"    sleep: {sleep}\n    gpus: [0]\n")
    comfy = comfy.replace("--step-delay 0.05", f"--step-delay 0.05 --gpu-mem {6 * GIB}")
    stack.write_config(
        f"healthCheckTimeout: 15\nstartPort: {free_port_run(2)}\nmodels:\n{comfy}{_other()}"
    )
    return stack


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with _stack("comfyui") as stack:
        yield stack


async def _job(session: aiohttp.ClientSession, url: str, up: ComfyUpstream) -> None:
    mark = up.mark()
    body = {"prompt": {"9": {"class_type": "SaveImage"}}, "client_id": "tab"}
    async with session.post(url + "/comfyui/api/prompt", json=body) as resp:
        assert resp.status == 200, await resp.text()
    await until(
        lambda: any(e["event"] == "job_done" for e in up.since(mark)), what="the job to finish"
    )


async def _swaps(stack: Stack) -> list[dict[str, Any]]:
    _, body = await asyncio.to_thread(stack.get_json, "/api/swaps")
    swaps: list[dict[str, Any]] = body["swaps"]
    return swaps


async def test_a_settings_change_and_a_workflow_save_do_not_wake_it_and_a_job_does(
    stack: Stack,
) -> None:
    swapd = Running(stack)
    up: ComfyUpstream = stack.up  # type: ignore[attr-defined]
    async with aiohttp.ClientSession() as session:
        async with session.get(swapd.url + "/comfyui/") as resp:
            assert resp.status == 200
        pid = int((await swapd.wait_state(MODEL, "ready"))["pid"])
        await _job(session, swapd.url, up)
        # The chat model takes the GPU: ComfyUI is put to sleep for it.
        await asyncio.to_thread(chat, swapd.url, "other")
        asleep = await swapd.wait_state(MODEL, "asleep")
        assert asleep["pid"] == pid
        other_pid = int((await swapd.status("other"))["pid"])
        before = len(await _swaps(stack))
        mark = up.mark()

        # A page saves its settings and a workflow while ComfyUI sleeps.
        saves = [
            ("/comfyui/api/settings/Comfy.ColorPalette", json.dumps("light")),
            ("/comfyui/api/settings", json.dumps({"Comfy.Sidebar.Size": "small"})),
            ("/comfyui/api/userdata/workflows%2Fmine.json", json.dumps({"nodes": [1]})),
        ]
        for path, body in saves:
            headers = {"Content-Type": "application/json"}
            async with session.post(swapd.url + path, data=body, headers=headers) as resp:
                assert resp.status == 200, (path, await resp.text())
        async with session.get(swapd.url + "/comfyui/api/settings") as resp:
            assert await resp.json() == {
                "Comfy.ColorPalette": "light",
                "Comfy.Sidebar.Size": "small",
            }
        async with session.get(swapd.url + "/comfyui/api/userdata/workflows%2Fmine.json") as resp:
            assert await resp.json() == {"nodes": [1]}

        saved = [e["what"] for e in up.since(mark) if e["event"] == "saved"]
        assert saved == ["settings", "settings", "userdata"]
        assert up.starts_since(mark) == 0
        still = await swapd.status(MODEL)
        assert still["state"] == "asleep" and still["pid"] == pid
        assert still["sleep"]["wakes"] == 0
        assert still["sleep"]["wake_on"] == ["POST /prompt", "POST /api/prompt"]
        other = await swapd.status("other")
        assert other["state"] == "ready" and other["pid"] == other_pid
        assert (await _swaps(stack))[before:] == [], "no swap, no wake"

        # A job wakes it, in the same process; the chat model makes room for it.
        await _job(session, swapd.url, up)
        awake = await swapd.status(MODEL)
        assert awake["state"] == "ready" and awake["pid"] == pid
        assert awake["sleep"]["wakes"] == 1
        assert (await swapd.status("other"))["state"] == "stopped"
        new = [(s["kind"], s["model"]) for s in (await _swaps(stack))[before:]]
        assert ("wake", MODEL) in new, new


async def test_an_open_tab_keeps_it_asleep_past_stop_after_and_it_stops_once_the_tab_closes() -> (
    None
):
    with _stack(f"{{preset: comfyui, stopAfter: {STOP_AFTER}}}") as stack:
        swapd = Running(stack)
        async with aiohttp.ClientSession() as session:
            async with session.get(swapd.url + "/comfyui/") as resp:
                assert resp.status == 200
            pid = int((await swapd.wait_state(MODEL, "ready"))["pid"])
            ws = await session.ws_connect(swapd.url + "/comfyui/ws?clientId=tab")
            try:
                async with session.post(swapd.url + f"/api/models/sleep/{MODEL}") as resp:
                    assert resp.status == 200, await resp.text()
                asleep = await swapd.wait_state(MODEL, "asleep")
                assert asleep["pid"] == pid
                held = await until(
                    lambda: _held(swapd), what="the daemon to know the tab's websocket"
                )
                assert held["sleep"]["stop_left"] is None
                text = (await asyncio.to_thread(stack.swapd, "status")).stdout
                assert "kept from its stopAfter while 1 websocket is open" in text, text

                # Well past its stopAfter, with the tab open: still asleep, the same process,
                # and the tab still hears from its server.
                past = float(asleep["since"]) + STOP_AFTER + 1.5
                while time.time() < past:
                    now = await swapd.status(MODEL)
                    assert now["state"] == "asleep" and now["pid"] == pid, now
                    await asyncio.sleep(0.1)
                msg = await ws.receive(timeout=10)
                assert msg.type == aiohttp.WSMsgType.TEXT, msg
            finally:
                await ws.close()

            # The tab closed: stopAfter counts from now, and then stops it.
            stopped = await swapd.wait_state(MODEL, "stopped", timeout=STOP_AFTER + 15)
            assert stopped["reason"] == "asleep and unused longer than its sleep.stopAfter"
            stops = [s for s in await _swaps(stack) if s["kind"] == "stop"]
            assert [(s["model"], s["cause"]) for s in stops] == [(MODEL, "asleep_ttl")]


async def _held(swapd: Running) -> dict[str, Any] | None:
    status = await swapd.status(MODEL)
    return status if status["sleep"]["websockets"] == 1 else None
