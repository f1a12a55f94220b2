"""Trace (d)'s shape end to end (benchmarks/traces/d_comfyui_chat.jsonl; issue 37 item 1): a
ComfyUI-like `comfyui_auto` with the ComfyUI sleep preset starts slowly for a job, and a chat
for another model on the same GPU comes while it starts. The job is served by the run started
for it before the chat's swap puts that run to sleep: one start, no wake, the job's request
reached the server before its `/free`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest

from tests.support.comfyui import MODEL, ComfyUpstream, Running, comfyui_model_yaml, until
from tests.support.sleeping import GIB, gpu_env
from tests.support.stack import Stack, fake_model_cmd, free_port_range

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    stack = Stack("", env=gpu_env())
    up = ComfyUpstream(stack.base, MODEL)
    stack.up = up  # type: ignore[attr-defined]
    extra = "    sleep: comfyui\n    gpus: [0]\n"
    comfy = comfyui_model_yaml(up, extra=extra, job_steps=3, step_delay=0.05)
    comfy = comfy.replace("--step-delay 0.05", f"--step-delay 0.05 --gpu-mem {6 * GIB}")
    chat = f"""
  chat:
    cmd: {fake_model_cmd("chat")}
    proxy: http://127.0.0.1:${{PORT}}
    unloadTimeout: 3
    gpus: [0]
"""
    # `${PORT}` goes from startPort up in model-id order: chat's, then comfyui_auto's.
    config = f"healthCheckTimeout: 30\nstartPort: {free_port_range(2)}\nmodels:\n{chat}{comfy}"
    stack.write_config(config)
    with stack:
        yield stack


async def test_a_job_that_waited_for_a_slow_start_is_served_by_it_before_a_chat_swaps_it_out(
    stack: Stack,
) -> None:
    swapd = Running(stack)
    up: ComfyUpstream = stack.up  # type: ignore[attr-defined]
    job = {"prompt": {"9": {"class_type": "SaveImage"}}, "client_id": "tab"}
    chat = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session:

        async def post(path: str, body: dict[str, object]) -> int:
            async with session.post(swapd.url + path, json=body) as resp:
                await resp.read()
                return resp.status

        mark = up.mark()
        with up.held():  # the start stays in its loading phase: a ComfyUI's slow start
            job_sent = asyncio.ensure_future(post("/comfyui/api/prompt", job))
            await swapd.wait_state(MODEL, "starting")
            chat_sent = asyncio.ensure_future(post("/v1/chat/completions", chat))
            await until(
                lambda: _waiting(swapd), what="the chat's swap to wait for comfyui_auto's start"
            )
        assert await asyncio.wait_for(job_sent, 60) == 200
        assert await asyncio.wait_for(chat_sent, 60) == 200
        events = up.since(mark)
        order = [e["event"] for e in events if e["event"] in ("start", "request", "free")]
        jobs = [
            i for i, e in enumerate(events) if e["event"] == "request" and "prompt" in e["path"]
        ]
        frees = [i for i, e in enumerate(events) if e["event"] == "free"]
        assert jobs and (not frees or jobs[0] < frees[0]), order
        assert up.starts_since(mark) == 1, order
        comfy = await swapd.status(MODEL)
        assert comfy["sleep"]["wakes"] == 0, comfy
        async with session.get(swapd.url + "/api/swaps") as resp:
            swaps = (await resp.json())["swaps"]
        assert not [s for s in swaps if s["model"] == MODEL and s["kind"] == "wake"], swaps


async def _waiting(swapd: Running) -> bool:
    return bool((await swapd.status("chat")).get("waiting"))
