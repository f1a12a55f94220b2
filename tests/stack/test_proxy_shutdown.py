"""The proxy's shutdown grace (contract C2) against the real stack: on SIGTERM it stops taking
requests (503 and `Connection: close` on a kept-alive connection), lets what is under way finish
within the grace, and ends what still streams after it cleanly. circusd then starts a new proxy
on the same socket, as it does after any exit.

The grace is `swapd run --shutdown-grace`, which `swapd run` passes on to the proxy.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import openai
import pytest

from tests.support.proxy import RawConnection, local_model, post_json
from tests.support.stack import Stack, free_port, wait_for

pytestmark = pytest.mark.processes

CHAT = "/v1/chat/completions"


def _proxy_pid(stack: Stack) -> int:
    (pid,) = stack.watcher_pids("swapd-proxy")
    return pid


async def _kept_alive(stack: Stack) -> RawConnection:
    conn = await RawConnection.open(stack.url)
    await conn.send(post_json(CHAT, {"model": "alpha"}))
    assert (await conn.response(30)).status == 200
    return conn


async def test_requests_under_way_finish_and_new_ones_are_refused(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(
        {"models": {"alpha": local_model("alpha", free_port())}},
        run_args=("--shutdown-grace", "30"),
    )
    idle = await _kept_alive(stack)
    streaming = await RawConnection.open(stack.url)
    await streaming.send(
        post_json(CHAT, {"model": "alpha", "stream": True, "x_chunks": 30, "x_delay": 0.1})
    )
    assert b"tok0" in await streaming.body_piece()
    pid = _proxy_pid(stack)
    os.kill(pid, signal.SIGTERM)
    # Until the proxy has handled the signal its answers are 200s; the first one after is a 503.
    deadline = time.monotonic() + 10
    while True:
        await idle.send(post_json(CHAT, {"model": "alpha"}))
        refused = await idle.response()
        if refused.status != 200 or time.monotonic() > deadline:
            break
    assert refused.status == 503 and refused.header("Connection") == "close"
    assert json.loads(refused.body)["error"]["code"] == "shutting_down"
    assert await idle.closed_by_server(10)

    done = await streaming.response(30)  # the stream under way runs to its end
    assert done.status == 200 and done.body.endswith(b"data: [DONE]\n\n")
    assert done.body.count(b"tok") == 30
    # A new proxy serves on the same port.
    wait_for(lambda: [p for p in stack.watcher_pids("swapd-proxy") if p != pid], 15, what="respawn")
    await _kept_alive(stack)


async def test_a_stream_past_the_grace_is_ended_cleanly(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(
        {"models": {"alpha": local_model("alpha", free_port())}},
        run_args=("--shutdown-grace", "1"),
    )
    await (await _kept_alive(stack)).close()  # alpha is ready
    streaming = await RawConnection.open(stack.url)
    await streaming.send(
        post_json(CHAT, {"model": "alpha", "stream": True, "x_chunks": 200, "x_delay": 0.05})
    )
    assert b"tok0" in await streaming.body_piece()
    os.kill(_proxy_pid(stack), signal.SIGTERM)
    # chunked: the terminating chunk arrives, long before the upstream's 10 s stream would end
    cut = await streaming.response(15)
    assert cut.status == 200 and cut.chunked
    assert b"tok0" in cut.body and b"[DONE]" not in cut.body
    # An event stream that was cut says so in its last event: an error, as OpenAI and llama.cpp
    # send one mid-stream, so a client can tell it from a whole answer.
    *_, last = [e for e in cut.body.split(b"\n\n") if e.strip()]
    assert last.startswith(b"data: "), cut.body[-300:]
    error = json.loads(last[len(b"data: ") :])["error"]
    assert (error["code"], error["type"]) == ("shutting_down", "server_error")
    assert "cut off" in error["message"]


async def test_the_openai_sdk_raises_on_a_stream_cut_by_the_shutdown(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(
        {"models": {"alpha": local_model("alpha", free_port())}},
        run_args=("--shutdown-grace", "1"),
    )
    await (await _kept_alive(stack)).close()  # alpha is ready
    pid = _proxy_pid(stack)
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="none", max_retries=0, timeout=30)
    stream = client.chat.completions.create(
        model="alpha",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        extra_body={"x_chunks": 200, "x_delay": 0.05},
    )
    chunks = iter(stream)
    first = await asyncio.to_thread(next, chunks)
    assert first.choices[0].delta.content == "tok0 "
    os.kill(pid, signal.SIGTERM)

    def read_to_the_end() -> list[Any]:
        return list(chunks)

    with pytest.raises(openai.APIError, match="cut off") as raised:
        await asyncio.to_thread(read_to_the_end)
    assert raised.value.body["code"] == "shutting_down"  # type: ignore[index]
