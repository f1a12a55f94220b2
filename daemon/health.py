"""Wait until a starting model answers its `checkEndpoint` with 200.

Polls every 50 ms (llama-swap waits 250 ms and then polls once a second, which is most of its swap
time), fails at once when the process exits and after `healthCheckTimeout`.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

POLL_INTERVAL = 0.05
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
    interval: float = POLL_INTERVAL,
) -> None:
    """Return once `url` answers 200 (at once when `url` is None: `checkEndpoint: none`).

    Raises ProcessExited when `exited` completes first, HealthTimeout after `timeout` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if exited.done():
            raise ProcessExited
        if url is None:
            return
        left = deadline - loop.time()
        if left <= 0:
            raise HealthTimeout
        attempt = asyncio.ensure_future(probe(session, url, min(PROBE_TIMEOUT, left)))
        done, _ = await asyncio.wait({attempt, exited}, return_when=asyncio.FIRST_COMPLETED)
        if attempt in done and attempt.result():
            return
        if exited in done:
            attempt.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await attempt
            raise ProcessExited
        pause = min(interval, max(0.0, deadline - loop.time()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(exited), pause)
