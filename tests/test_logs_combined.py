"""The combined log (`/logs`, `/logs/stream`; proxy/observe/combined_log.py) against the real stack:
the proxy's own lines and the models' output in the order they were written, the history as the
live stream, and a model's lines from before the proxy process started first.

The order checked is one the combined log guarantees (a model line written before a proxy line
was logged comes before it), so no timing is guessed: a model's start line is written before the
request that started it can be answered and logged (`--health-delay 1` makes that gap plain), and
the test waits for each request's access line before sending the next."""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from swapd.ipc.routing_table import RouteModel, RoutingTable
from swapd.proxy.mirror.state import ProxyState
from swapd.proxy.observe.combined_log import COMBINED_BYTES, CombinedLog
from swapd.proxy.observe.log_files import model_log_path
from swapd.proxy.observe.log_hub import LogHub
from tests.proxy_helpers import local_model, model_ports
from tests.stack import Stack, wait_for


def _logs(stack: Stack) -> str:
    with urllib.request.urlopen(stack.url + "/logs", timeout=10) as response:
        text: str = response.read().decode()
        return text


def _logs_or_empty(stack: Stack) -> str:
    try:
        return _logs(stack)
    except OSError:  # the proxy process is restarting
        return ""


def _chat(stack: Stack, model: str) -> None:
    body = json.dumps({"model": model, "messages": []}).encode()
    request = urllib.request.Request(
        stack.url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


def _order(text: str, *needles: str) -> list[int]:
    return [text.index(n) for n in needles]


def started(model: str) -> str:
    return f"[{model}] fake model {model} starting on port"


def served(model: str) -> str:
    return f"model={model} "


def _request_then_logged(stack: Stack, model: str) -> None:
    count = _logs(stack).count(served(model))
    _chat(stack, model)
    wait_for(lambda: _logs(stack).count(served(model)) > count, 10, what=f"{model}'s access line")


@pytest.mark.processes
def test_lines_in_the_order_they_were_written(stack_factory: Callable[..., Stack]) -> None:
    a, b = model_ports(2)
    stack = stack_factory(
        {
            "healthCheckTimeout": 15,
            "models": {
                "a": local_model("a", a, "--health-delay", "1"),
                "b": local_model("b", b, "--health-delay", "1"),
            },
        }
    )
    _request_then_logged(stack, "a")
    _request_then_logged(stack, "b")  # swaps a out
    text = _logs(stack)
    positions = _order(text, started("a"), served("a"), started("b"), served("b"))
    assert positions == sorted(positions), text  # grouped per source, a's line would follow b's

    async def stream_then_live() -> tuple[str, str]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(stack.url + "/logs/stream") as resp,
        ):
            history = (await resp.content.readuntil(served("b").encode())).decode()
            await asyncio.to_thread(_chat, stack, "a")  # swaps back: new lines, live
            live = b""
            async with asyncio.timeout(15):
                while served("a").encode() not in live:
                    live += await resp.content.readany()
            return history, live.decode()

    history, live = asyncio.run(stream_then_live())
    assert _order(history, started("a"), served("a"), started("b")) == sorted(
        _order(history, started("a"), served("a"), started("b"))
    )
    assert live.index(started("a")) < live.index(served("a")), live


@pytest.mark.processes
def test_models_older_lines_come_first(stack_factory: Callable[..., Stack]) -> None:
    """A proxy process started after a model wrote its log: the model's lines (from its file)
    are older than anything the new process logged, so they come first."""
    (a,) = model_ports(1)
    stack = stack_factory({"models": {"a": local_model("a", a)}})
    _chat(stack, "a")
    wait_for(lambda: started("a") in _logs(stack), 10, what="a's start line")
    stack.kill_watcher("swapd-proxy", signal.SIGTERM)
    wait_for(lambda: started("a") in _logs_or_empty(stack), 20, what="the new proxy's /logs")
    text = _logs(stack)
    assert text.index(started("a")) < text.index("routing table generation"), text


def _state(log_dir: Path, *ids: str) -> ProxyState:
    state = ProxyState()
    models = tuple(
        RouteModel(id=i, upstream="http://127.0.0.1:9", concurrency_limit=1, ttl=0) for i in ids
    )
    state._apply_table(RoutingTable(generation=1, models=models, log_dir=str(log_dir)))
    return state


async def _until(log: CombinedLog, text: bytes) -> bytes:
    # The ring itself is what is observed: the older lines it starts with reach no subscriber.
    async with asyncio.timeout(5):
        while text not in log.history():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    return log.history()


def test_the_ring_follows_rotation_and_keeps_whole_lines(tmp_path: Path) -> None:
    """The combined log's own rules, on real files with a real `LogHub` and `ProxyState`: the
    models' older lines before the proxy's, a truncated (rotated) file followed from its start,
    partial lines held until whole, a model the table gains from then on, and the ring cut at a
    line start."""
    a = model_log_path(str(tmp_path), "a")
    a.write_bytes(b"old a line\n")

    async def scenario() -> None:
        hub = LogHub()
        hub.feed(b"proxy line 1\n")
        state = _state(tmp_path, "a")
        log = CombinedLog(hub, state)
        log.start()
        try:
            text = await _until(log, b"[a] old a line\n")
            assert text == b"[a] old a line\nproxy line 1\n"
            with a.open("ab") as f:
                f.write(b"half")
            hub.feed(b"proxy line 2\n")
            with a.open("ab") as f:
                f.write(b" and the rest\n")
            text = await _until(log, b"[a] half and the rest\n")
            assert text.endswith(b"proxy line 2\n[a] half and the rest\n")
            a.write_bytes(b"rotated\n")  # truncated: read again from the start
            await _until(log, b"[a] rotated\n")
            b = model_log_path(str(tmp_path), "b")
            b.write_bytes(b"b before it was in the table\n")
            grown = _state(tmp_path, "a", "b")
            state._apply_table(grown.routes.table)
            await asyncio.sleep(0.5)  # a few ticks: b is followed from its end
            with b.open("ab") as f:
                f.write(b"b new\n")
            text = await _until(log, b"[b] b new\n")
            assert b"b before" not in text
            hub.feed(b"x" * 100 + b"\n")
            for _ in range(COMBINED_BYTES // 100):
                hub.feed(b"y" * 99 + b"\n")
            ring = log.history()
            assert len(ring) <= COMBINED_BYTES and ring.startswith(b"y")
        finally:
            await log.close()

    asyncio.run(scenario())
