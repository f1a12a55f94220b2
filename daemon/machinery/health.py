"""Wait until a starting model answers its `checkEndpoint` with 200.

Polls every 5 ms for the first 2 s, every 50 ms up to 10 s, then every 100 ms (llama-swap
waits 250 ms and then polls once a second, which is most of its swap time); fails at once when
the process exits and after `healthCheckTimeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp

# Fast at first, where most test and small-model starts finish and every ms is swap latency;
# slower for models that take many seconds to load, where a few ms more do not matter.
# A 5 ms step costs about 2.5 ms of swap latency on average (half a step), 10 ms cost 5 ms.
POLL_STEPS = ((2.0, 0.005), (10.0, 0.05))
POLL_SLOW = 0.1
# One probe may take this long before it counts as a miss (a server that accepts but never answers).
PROBE_TIMEOUT = 2.0


class HealthTimeout(Exception):
    pass


class ProcessExited(Exception):
    pass


async def probe(session: aiohttp.ClientSession, url: str, timeout: float) -> bool:
    try:
        async with session.get(
            url, timeout=aiohttp.ClientTimeout(total=timeout), allow_redirects=False
        ) as response:
            await response.read()
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def wait_healthy(
    session: aiohttp.ClientSession,
    url: str | None,
    *,
    timeout: float,
    exited: asyncio.Future[object] | asyncio.Task[object],
) -> None:
    """Return once `url` answers 200 (at once when `url` is None: `checkEndpoint: none`).

    Raises ProcessExited when `exited` completes first, HealthTimeout after `timeout` seconds.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + timeout
    while True:
        if exited.done():
            raise ProcessExited
        if url is None:
            return
        left = deadline - loop.time()
        if left <= 0:
            raise HealthTimeout
        attempt = asyncio.ensure_future(probe(session, url, min(PROBE_TIMEOUT, left)))
        either: set[asyncio.Future[Any]] = {attempt, exited}
        done, _ = await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if attempt in done and attempt.result():
            return
        if exited in done:
            attempt.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await attempt
            raise ProcessExited
        pause = min(poll_interval(loop.time() - started), max(0.0, deadline - loop.time()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(exited), pause)


def poll_interval(elapsed: float) -> float:
    for until, interval in POLL_STEPS:
        if elapsed < until:
            return interval
    return POLL_SLOW
