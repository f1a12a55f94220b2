"""The combined log (`/logs`, `/logs/stream`; proxy/observe/combined_log.py) against the real stack:
the proxy's own lines and the models' output in the order they were written, the history as the
live stream, and a model's lines from before the proxy process started first.

The order checked is one the combined log guarantees (a model line written before a proxy line
was logged comes before it), so no timing is guessed: a model's start line is written before the
request that started it can be answered and logged (`--health-delay 1` makes that gap plain), and
the test waits for each request's access line before sending the next."""

from __future__ import annotations

import asyncio
import signal
import urllib.request
from collections.abc import Callable

import aiohttp
import pytest

from tests.support.combined_log import served, started
from tests.support.daemon import chat
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for


def _logs(stack: Stack) -> str:
    with urllib.request.urlopen(stack.url + "/logs", timeout=10) as response:
        text: str = response.read().decode()
        return text


def _logs_or_empty(stack: Stack) -> str:
    try:
        return _logs(stack)
    except OSError:  # the proxy process is restarting
        return ""


def _order(text: str, *needles: str) -> list[int]:
    return [text.index(n) for n in needles]


def _request_then_logged(stack: Stack, model: str) -> None:
    count = _logs(stack).count(served(model))
    chat(stack.url, model)
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
            await asyncio.to_thread(chat, stack.url, "a")  # swaps back: new lines, live
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
    chat(stack.url, "a")
    wait_for(lambda: started("a") in _logs(stack), 10, what="a's start line")
    stack.kill_watcher("swapd-proxy", signal.SIGTERM)
    wait_for(lambda: started("a") in _logs_or_empty(stack), 20, what="the new proxy's /logs")
    text = _logs(stack)
    assert text.index(started("a")) < text.index("routing table generation"), text
