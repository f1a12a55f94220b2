"""Swaps, drains and broken upstreams through the proxy, against the real stack with two proxy
processes sharing the port (so a drain needs both proxies' acks)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import aiohttp
import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    alpha, beta = model_ports(2)
    config = {
        "healthCheckTimeout": 15,
        # Default group: one model at a time, so loading beta evicts alpha.
        "models": {"alpha": local_model("alpha", alpha), "beta": local_model("beta", beta)},
    }
    with Stack(config, proxy_processes=2) as running:
        yield running


async def _read_lines(resp: aiohttp.ClientResponse) -> tuple[list[bytes], float]:
    lines = [line async for line in resp.content]
    return lines, asyncio.get_running_loop().time()


async def test_a_swap_waits_for_streams_to_the_old_model(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(stack.url + "/upstream/alpha/") as resp:
            assert resp.status == 200
        streams = [
            await session.get(stack.url + f"/upstream/alpha/slow?n=12&delay=0.1&tag=s{i}")
            for i in range(4)
        ]
        # Each get() returned with the headers: all four streams are in flight now.
        readers = [asyncio.ensure_future(_read_lines(s)) for s in streams]
        loop = asyncio.get_running_loop()
        async with session.post(stack.url + "/v1/chat/completions", json={"model": "beta"}) as resp:
            beta_done = loop.time()
            assert resp.status == 200
            assert (await resp.json())["served_by"]["name"] == "beta"
        results = await asyncio.gather(*readers)
        for lines, _ in results:
            assert lines == [f"{i}\n".encode() for i in range(12)]  # none cut off
        for stream in streams:
            stream.close()
        # beta could only start once alpha was drained: after the last stream ended.
        assert beta_done >= max(ended for _, ended in results)
    assert stack.model("alpha")["state"] == "stopped"
    assert "finished 12 chunks" in stack.model_log("alpha")
    assert "client gone" not in stack.model_log("alpha")


async def test_a_swap_waits_for_hot_path_streams_to_the_old_model(stack: Stack) -> None:
    # JSON chat requests with a body of known length: served by the proxies' hot path, which must
    # hold the drain back just the same.
    async with aiohttp.ClientSession() as session:
        async with session.post(stack.url + "/v1/chat/completions", json={"model": "alpha"}) as r:
            assert r.status == 200
        body = {"model": "alpha", "stream": True, "x_chunks": 12, "x_delay": 0.1}
        streams = [
            await session.post(stack.url + "/v1/chat/completions", json={**body, "x_tag": f"h{i}"})
            for i in range(4)
        ]
        readers = [asyncio.ensure_future(_read_lines(s)) for s in streams]
        loop = asyncio.get_running_loop()
        async with session.post(stack.url + "/v1/chat/completions", json={"model": "beta"}) as r:
            beta_done = loop.time()
            assert r.status == 200
            assert (await r.json())["served_by"]["name"] == "beta"
        results = await asyncio.gather(*readers)
        for lines, _ in results:
            assert lines[-2:] == [b"data: [DONE]\n", b"\n"]  # none cut off
            assert sum(b"tok" in line for line in lines) == 12
        for stream in streams:
            stream.close()
        assert beta_done >= max(ended for _, ended in results)
    assert stack.model("alpha")["state"] == "stopped"
    assert "client gone" not in stack.model_log("alpha")


async def test_an_upstream_killed_mid_stream_ends_the_response(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(stack.url + "/upstream/beta/slow?n=200&delay=0.05") as resp:
            assert resp.status == 200
            assert await resp.content.readline() == b"0\n"
            os.kill(stack.model("beta")["pid"], signal.SIGKILL)
            rest = await asyncio.wait_for(resp.content.read(), 10)  # ends; never hangs
        assert not rest.endswith(b"199\n")
        # The next request gets a fresh beta.
        wait_for(lambda: stack.model("beta")["state"] != "ready", 10, what="beta seen dead")
        async with session.post(stack.url + "/v1/chat/completions", json={"model": "beta"}) as resp:
            assert resp.status == 200


async def test_connection_refused_by_a_dead_upstream_is_502_json(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(stack.url + "/upstream/alpha/") as resp:
            assert resp.status == 200
        os.kill(stack.model("alpha")["pid"], signal.SIGKILL)
        async with session.get(stack.url + "/upstream/alpha/x") as resp:
            # Either the proxy still thought alpha ready (502 JSON) or already knew (restart: 200).
            assert resp.status in (200, 502)
            if resp.status == 502:
                assert "alpha" in (await resp.json())["error"]["message"]


async def test_daemon_restart_is_picked_up(stack: Stack) -> None:
    stack.kill_watcher("swapd-daemon")
    async with aiohttp.ClientSession() as session:
        for model in ("alpha", "beta", "alpha"):
            async with session.post(
                stack.url + "/v1/chat/completions", json={"model": model}
            ) as resp:
                assert resp.status == 200, await resp.text()
                assert (await resp.json())["served_by"]["name"] == model
