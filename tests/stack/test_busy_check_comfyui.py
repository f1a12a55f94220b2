"""`busyCheck: comfyui`, end to end: real swapd, the ComfyUI-like upstream standing in for the
seed's ComfyUI container, its jobs watched over the websocket as the browser tab does.

Without `busyCheck` a render longer than the TTL is unloaded mid-job: that is the seed's own
behaviour, tested with the same upstream in `test_comfyui_ttl.py`
(`test_a_long_render_watched_over_the_websocket_is_idle_time`). Here, with the check, the same
kind of render holds the TTL and a swap. Timings come from the upstream's own clock (each event
it logs carries `at`).
"""

from __future__ import annotations

import asyncio
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
from tests.support.stack import Stack, fake_model_cmd

pytestmark = [pytest.mark.processes, pytest.mark.timeout(240)]

TTL = 2
# A second ComfyUI instance, served through /upstream/, whose swaps wait at most this long.
BOUNDED = "comfy-bounded"
SWAP_WAIT = 3
LLM = "llm"


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    stack = Stack("")
    up = ComfyUpstream(stack.base, MODEL)
    bounded = ComfyUpstream(stack.base, BOUNDED)
    stack.up = up  # type: ignore[attr-defined]
    stack.bounded = bounded  # type: ignore[attr-defined]
    comfy = comfyui_model_yaml(up, ttl=TTL, extra="    busyCheck: comfyui\n")
    other = comfyui_model_yaml(
        bounded,
        ttl=0,
        extra=(
            "    concurrencyLimit: 999\n    compat:\n      ignoreWebsockets: true\n"
            f"    busyCheck:\n      preset: comfyui\n      swapWait: {SWAP_WAIT}\n"
        ),
    )
    llm = f"  {LLM}:\n    cmd: {fake_model_cmd(LLM)}\n    sendLoadingState: true\n"
    stack.write_config(
        f"healthCheckTimeout: 15\nstartPort: {free_port_run(3)}\nmodels:\n{comfy}{other}{llm}"
    )
    with stack:
        yield stack


@pytest.fixture
def bounded(stack: Stack) -> ComfyUpstream:
    return stack.bounded  # type: ignore[attr-defined,no-any-return]


def _at(up: ComfyUpstream, mark: int, event: str) -> float | None:
    for e in up.since(mark):
        if e["event"] == event:
            return float(e["at"])
    return None


async def _busy(swapd: Running, model: str) -> dict[str, Any] | None:
    """The model's `busy` in `swapd status --json`, when it reports busy."""
    busy = (await swapd.status(model)).get("busy")
    return busy if busy and busy["busy"] else None


async def _queue(
    session: aiohttp.ClientSession, base: str, *, steps: int, delay: float = 0.25
) -> str:
    body = {
        "prompt": {"3": {"class_type": "KSampler", "inputs": {"steps": steps}}},
        "client_id": "render",
        "extra_data": {"x_steps": steps, "x_step_delay": delay},
    }
    async with session.post(base + "/api/prompt", json=body) as resp:
        assert resp.status == 200
        return str((await resp.json())["prompt_id"])


async def _load(swapd: Running, session: aiohttp.ClientSession, base: str, model: str) -> int:
    async with session.get(base + "/") as resp:
        assert resp.status == 200
    return int((await swapd.wait_state(model, "ready"))["pid"])


async def _busy_with_job(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream, base: str, steps: int
) -> tuple[int, dict[str, Any]]:
    """Load the model, queue a job of `steps` steps (-1: never ending) and wait until the check
    reports it; returns the upstream's log mark from before the job and the `busy` status."""
    await _load(swapd, session, base, up.model_id)
    mark = up.mark()
    await _queue(session, base, steps=steps)
    busy = await until(lambda: _busy(swapd, up.model_id), 10, "the check to find the job")
    return mark, busy


async def test_a_render_longer_than_the_ttl_holds_the_model_until_it_ends(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    base = swapd.url + "/comfyui"
    pid = await _load(swapd, session, base, MODEL)
    mark = up.mark()
    ws = await session.ws_connect(base + "/ws?clientId=render")
    await ws.receive_json(timeout=10)
    # 20 steps of 0.25 s: 5 s, two and a half TTLs, watched over the websocket only.
    prompt_id = await _queue(session, base, steps=20)
    busy = await until(lambda: _busy(swapd, MODEL), 10, "the check to find the job")
    assert busy["message"] == "busy (upstream reports 1 running job)"
    assert busy["jobs"] == 1
    text = (await asyncio.to_thread(swapd.stack.swapd, "status")).stdout
    assert f"{MODEL}: busy (upstream reports 1 running job)" in text
    assert "held (busy)" in text  # TTL LEFT
    async with session.get(swapd.url + "/running") as resp:
        (entry,) = [m for m in (await resp.json())["running"] if m["model"] == MODEL]
    assert entry["busy"]["message"] == "busy (upstream reports 1 running job)"
    assert entry["ttl_left"] is None

    progress = []
    async with asyncio.timeout(30):
        while True:
            message = await ws.receive_json()
            if message["type"] == "progress":
                progress.append(message["data"]["value"])
            if message["type"] == "executing" and message["data"]["node"] is None:
                assert message["data"]["prompt_id"] == prompt_id
                break
    assert progress == list(range(1, 21))  # every step, none cut off
    entry = await swapd.status(MODEL)
    assert (entry["state"], entry["pid"]) == ("ready", pid)
    # Idle now: unloaded once the TTL has passed after the job, not before.
    await swapd.wait_state(MODEL, "stopped", timeout=TTL + 15)
    done, exited = _at(up, mark, "job_done"), _at(up, mark, "exit")
    assert done is not None and exited is not None
    assert exited - done >= TTL
    await ws.close()


async def test_a_swap_requested_mid_job_waits_for_the_job(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    mark, _ = await _busy_with_job(swapd, session, up, swapd.url + "/comfyui", 12)  # 3 s
    chat = {"model": LLM, "messages": [{"role": "user", "content": "hi"}]}

    async def ask() -> tuple[int, float]:
        async with session.post(swapd.url + "/v1/chat/completions", json=chat) as resp:
            await resp.read()
            return resp.status, time.time()

    asking = asyncio.ensure_future(ask())
    held = await until(lambda: _holding(swapd, MODEL), 10, "the held swap")
    assert held["holding"] == [LLM]
    assert "a swap to llm waits for it" in held["message"]
    assert await swapd.state(MODEL) == "ready"  # it serves on while the swap waits
    status, answered = await asyncio.wait_for(asking, 30)
    assert status == 200
    done, exited = _at(up, mark, "job_done"), _at(up, mark, "exit")
    assert done is not None and exited is not None
    assert done <= exited <= answered
    await swapd.wait_state(LLM, "ready")


async def _waiting(swapd: Running, model: str) -> dict[str, Any] | None:
    waiting = (await swapd.status(model)).get("waiting")
    return waiting if waiting and waiting["holding"] else None


async def _checked_at(session: aiohttp.ClientSession, swapd: Running, model: str) -> float:
    async with session.get(swapd.url + "/running") as resp:
        (entry,) = [m for m in (await resp.json())["running"] if m["model"] == model]
    return float(entry["busy"]["checked_at"])


async def test_a_waiting_swap_says_what_it_waits_for_to_the_client_and_in_its_record(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    await _busy_with_job(swapd, session, up, swapd.url + "/comfyui", 16)  # 4 s
    # `/running`'s busy reading: `checked_at` is its last poll, which moves on while the
    # reading stays the same (every `interval`, 1 s by default).
    polled = await _checked_at(session, swapd, MODEL)
    await until(
        lambda: _later_poll(session, swapd, polled), 10, "a later poll in /running's checked_at"
    )
    chat = {"model": LLM, "stream": True, "messages": [{"role": "user", "content": "hi"}]}

    async def ask() -> str:
        async with session.post(swapd.url + "/v1/chat/completions", json=chat) as resp:
            assert resp.status == 200
            return (await resp.read()).decode()

    asked = time.time()
    asking = asyncio.ensure_future(ask())
    # The target's status says what its swap waits for, since when and until when at most.
    waiting = await until(lambda: _waiting(swapd, LLM), 10, "the wait on the target's status")
    assert (waiting["reason"], waiting["holding"]) == (f"busy: {MODEL}", [MODEL])
    assert asked - 1 < waiting["since"] <= time.time() < waiting["until"]
    text = (await asyncio.to_thread(swapd.stack.swapd, "status")).stdout
    assert f"{LLM}: a swap to it waits (for " in text
    assert f"): busy: {MODEL} (at most until " in text
    # The client is told the same, with the loading progress (sendLoadingState).
    body = await asyncio.wait_for(asking, 30)
    said = f"waiting for {MODEL} to finish its work (busyCheck: busy); at most until "
    assert said in body, body
    assert f"waiting for {LLM}\n" not in body  # the bare fallback, which says nothing
    assert "Done!" in body and "[DONE]" in body
    assert (await swapd.status(LLM)).get("waiting") is None
    # One swap record, with its request's whole wait and what it waited for; the stop of the
    # busy model is folded into it.
    async with session.get(swapd.url + "/api/swaps") as resp:
        records = (await resp.json())["swaps"]
    record = [r for r in records if r["model"] == LLM][-1]
    assert (record["kind"], record["evicted"]) == ("swap", [MODEL])
    assert record["waited_for"] == [f"busy: {MODEL}"]
    assert record["queued"] == waiting["since"]
    assert record["waited"] > record["ended"] - record["began"]
    (folded,) = record["folded"]
    stop = next(r for r in records if r["id"] == folded)
    assert (stop["kind"], stop["model"], stop["for_model"]) == ("stop", MODEL, LLM)
    await swapd.wait_state(LLM, "ready")


async def _later_poll(session: aiohttp.ClientSession, swapd: Running, after: float) -> bool:
    return await _checked_at(session, swapd, MODEL) > after


async def _holding(swapd: Running, model: str) -> dict[str, Any] | None:
    busy = (await swapd.status(model)).get("busy")
    return busy if busy and busy["holding"] else None


async def test_a_swap_goes_ahead_after_swap_wait_when_the_job_never_ends(
    swapd: Running, session: aiohttp.ClientSession, bounded: ComfyUpstream
) -> None:
    base = f"{swapd.url}/upstream/{BOUNDED}"
    mark, busy = await _busy_with_job(swapd, session, bounded, base, -1)
    assert busy["message"] == "busy (upstream reports 1 running job)"
    chat = {"model": LLM, "messages": [{"role": "user", "content": "hi"}]}
    asked = time.time()
    async with session.post(swapd.url + "/v1/chat/completions", json=chat) as resp:
        assert resp.status == 200
    exited = _at(bounded, mark, "exit")
    assert exited is not None and exited - asked >= SWAP_WAIT
    assert _at(bounded, mark, "job_done") is None  # it never ended: stopped under the job
    assert await swapd.state(BOUNDED) == "stopped"


async def test_an_unload_is_not_held_back_by_a_busy_model(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    mark, _ = await _busy_with_job(swapd, session, up, swapd.url + "/comfyui", -1)
    # A swap would give the job 600 s (swapWait), far past this test's timeout; the unload
    # stops the model under it.
    await swapd.unload(MODEL)
    assert _at(up, mark, "exit") is not None and _at(up, mark, "job_done") is None
    assert (await swapd.status(MODEL)).get("busy") is None
