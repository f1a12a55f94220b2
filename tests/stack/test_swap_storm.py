"""A swap storm through the real stack: 16 clients spread over three models (fake_model.py
processes, one at a time), each request sent as soon as the client's last one was answered, so
most of them wait for a swap and are answered from a `Ready` the daemon hands out just as the next
swap wants the model gone. None may be lost (a 502 from the closed port of a model stopped under
it, a 503 `state_out_of_step`), and each is answered by the model it asked for (docs/swapping.md,
"A model made ready serves its waiting requests first")."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator

import aiohttp
import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack

pytestmark = pytest.mark.processes

MODELS = ("alpha", "beta", "gamma")
CLIENTS = 16
REQUESTS = 300
STORMS = 2


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    ports = model_ports(len(MODELS))
    config = {
        "healthCheckTimeout": 30,
        # Room for every client on each proxy process: a 429 is not what this is about.
        "models": {
            m: local_model(m, p, concurrencyLimit=2 * CLIENTS)
            for m, p in zip(MODELS, ports, strict=True)
        },
    }
    # Two proxy processes share the port: a drain needs both acks, and each sees its own Readys.
    with Stack(config, proxy_processes=2) as running:
        yield running


async def _storm(url: str, seed: int) -> Counter[str]:
    """REQUESTS chat requests from CLIENTS clients, each for a model picked at random; what
    came back, counted: "ok", or the status and what went wrong."""
    rng = random.Random(seed)
    asks = [rng.choice(MODELS) for _ in range(REQUESTS)]
    outcomes: Counter[str] = Counter()
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def client() -> None:
            while asks:
                model = asks.pop()
                body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
                async with session.post(url + "/v1/chat/completions", json=body) as resp:
                    if resp.status != 200:
                        outcomes[f"{resp.status} {(await resp.text())[:120]}"] += 1
                        continue
                    served = (await resp.json())["served_by"]["name"]
                    outcomes["ok" if served == model else f"asked {model}, got {served}"] += 1

        await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return outcomes


@pytest.mark.parametrize("storm", range(STORMS))
async def test_a_swap_storm_loses_no_request(stack: Stack, storm: int) -> None:
    outcomes = await _storm(stack.url, seed=storm)
    assert outcomes == Counter({"ok": REQUESTS}), outcomes
