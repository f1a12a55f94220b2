"""`comfyui_auto` and its TTL, end to end (real swapd, ComfyUI-like upstream for the container).

The seed's troubleshooting rows that are about time: an open tab (websocket plus polling of
ignored paths) does not keep the model loaded; a polled path outside the list does; a long render
watched over the websocket is idle time, so the model unloads under it. `ttl` is 2 s here so each
test takes a few seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import aiohttp
import pytest

from tests.support.comfyui import (
    IGNORED_PATH,
    MODEL,
    ComfyUpstream,
    Running,
    attempt,
    closed,
    comfyui_model_yaml,
    free_port_run,
    polling,
    until,
)
from tests.support.stack import Stack

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

TTL = 2
# A render that runs well past the TTL: 40 steps of 0.15 s.
JOB_STEPS = 40


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    stack = Stack("")
    up = ComfyUpstream(stack.base, MODEL)
    stack.up = up  # type: ignore[attr-defined]
    comfy = comfyui_model_yaml(up, ttl=TTL, job_steps=JOB_STEPS, step_delay=0.15)
    stack.write_config(f"healthCheckTimeout: 15\nstartPort: {free_port_run(1)}\nmodels:\n{comfy}")
    with stack:
        yield stack


async def _fresh_start(swapd: Running, session: aiohttp.ClientSession) -> int:
    """Load the page from a stopped model; return the server's pid."""
    if await swapd.state(MODEL) != "stopped":
        await swapd.unload(MODEL)
    async with session.get(swapd.url + "/comfyui/") as resp:
        assert resp.status == 200
    return int((await swapd.wait_state(MODEL, "ready"))["pid"])


async def test_an_open_idle_tab_does_not_keep_the_model_loaded(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    await _fresh_start(swapd, session)
    mark = up.mark()
    ws = await session.ws_connect(swapd.url + "/comfyui/ws?clientId=idle")
    assert (await ws.receive_json(timeout=10))["type"] == "status"
    # What an open page does: poll the job list and fetch assets, with its websocket open.
    async with (
        polling(session, swapd.url + "/comfyui/api/jobs") as jobs,
        polling(session, swapd.url + "/comfyui/scripts/app.js", every=0.5) as assets,
    ):
        await swapd.wait_state(MODEL, "stopped", timeout=TTL + 10)
        await closed(ws)
        served = (len(jobs), len(assets))
        # The page polls on after the unload: none of it may load the model again.
        await until(
            lambda: len(jobs) >= served[0] + 3 and len(assets) >= served[1] + 2,
            what="the page's polls after the unload",
        )
    assert jobs[: served[0]].count(200) >= 3  # it did poll successfully while loaded
    assert set(jobs[served[0] :]) == {409} and set(assets[served[1] :]) <= {409}
    assert await swapd.state(MODEL) == "stopped"
    assert up.starts_since(mark) == 0
    status, error = await attempt(session, swapd.url + "/comfyui/api/jobs")
    assert (status, error and error["message"]) == (409, IGNORED_PATH)


async def test_a_polled_path_outside_the_list_keeps_it_loaded_and_reloads_it(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    pid = await _fresh_start(swapd, session)
    async with polling(session, swapd.url + "/comfyui/api/system_stats", every=0.3) as polls:
        # Three TTLs of polling: the model must stay loaded, the same process throughout.
        end = time.monotonic() + 3 * TTL
        while time.monotonic() < end:
            entry = await swapd.status(MODEL)
            assert (entry["state"], entry["pid"]) == ("ready", pid)
            await asyncio.sleep(0.1)
    assert polls.count(200) >= 3 * TTL  # it polled all along (every 0.3 s)
    await swapd.wait_state(MODEL, "stopped", timeout=TTL + 10)
    # ... and such a request loads it again after the TTL unload.
    mark = up.mark()
    async with session.get(swapd.url + "/comfyui/api/system_stats") as resp:
        assert resp.status == 200
    assert up.starts_since(mark) == 1
    assert await swapd.state(MODEL) == "ready"


async def test_a_long_render_watched_over_the_websocket_is_idle_time(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    await _fresh_start(swapd, session)
    mark = up.mark()
    ws = await session.ws_connect(swapd.url + "/comfyui/ws?clientId=render")
    await ws.receive_json(timeout=10)
    body = {"prompt": {"3": {"class_type": "KSampler"}}, "client_id": "render"}
    async with session.post(swapd.url + "/comfyui/api/prompt", json=body) as resp:
        assert resp.status == 200
    # The render runs JOB_STEPS * 0.15 s = 6 s, three TTLs; the progress only flows over the
    # websocket, so the model unloads under it and the tab loses its connection.
    seen = await closed(ws, timeout=TTL + 15)
    progress = [m["data"]["value"] for m in seen if m["type"] == "progress"]
    assert progress, "the render did report progress before the unload"
    assert max(progress) < JOB_STEPS
    await swapd.wait_state(MODEL, "stopped")
    events = [e["event"] for e in up.since(mark)]
    assert "job_done" not in events and events[-1] == "exit"
