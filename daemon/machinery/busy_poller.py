"""Polls each ready model's `busyCheck` path: one task per model, every `interval` seconds, each
GET bounded by `timeout`. Never on a request's path: the proxies never wait for it.

What a poll got (the answer's bytes, or why there is none) goes to `on_answer`; reading it is the
policy's job (`policy/busy_answer.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp

from ..config import BusyCheck

log = logging.getLogger("swapd.busy")

# vLLM's /metrics is some hundred KiB; a larger answer is not a status page.
MAX_ANSWER = 16 * 2**20

OnAnswer = Callable[[str, BusyCheck, bytes | None, str], None]


@dataclass(frozen=True)
class Target:
    upstream: str  # the model's base URL (its `proxy`)
    check: BusyCheck

    @property
    def url(self) -> str:
        return self.upstream.rstrip("/") + self.check.path


class BusyProbes:
    def __init__(
        self, on_answer: OnAnswer, session: Callable[[], aiohttp.ClientSession] | None = None
    ) -> None:
        self.on_answer = on_answer
        # The daemon's client session for its models (the health checks' one), or an own one.
        self._session_of = session
        self._own: aiohttp.ClientSession | None = None
        self._targets: dict[str, Target] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session_of is not None:
            return self._session_of()
        if self._own is None or self._own.closed:
            self._own = aiohttp.ClientSession()
        return self._own

    def sync(self, wanted: Mapping[str, Target]) -> list[str]:
        """Poll exactly the models in `wanted`; returns those no longer polled."""
        if self._closed:
            wanted = {}
        dropped = [m for m, t in self._targets.items() if wanted.get(m) != t]
        for model_id in dropped:
            del self._targets[model_id]
            task = self._tasks.pop(model_id, None)
            if task is not None:
                task.cancel()
        for model_id, target in wanted.items():
            if model_id not in self._targets:
                self._targets[model_id] = target
                task = asyncio.get_running_loop().create_task(self._loop(model_id, target))
                self._tasks[model_id] = task
        return [m for m in dropped if m not in wanted]

    async def check_now(self, model_id: str) -> None:
        """One poll now (a swap is about to stop the model); nothing when it is not polled."""
        target = self._targets.get(model_id)
        if target is not None:
            await self._poll(model_id, target)

    async def _loop(self, model_id: str, target: Target) -> None:
        while True:
            await self._poll(model_id, target)
            await asyncio.sleep(target.check.interval)

    async def _poll(self, model_id: str, target: Target) -> None:
        body, error = await fetch(self.session, target.url, target.check.timeout)
        if self._targets.get(model_id) == target:  # not dropped meanwhile
            self.on_answer(model_id, target.check, body, error)

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._targets.clear()
        if self._own is not None:
            with contextlib.suppress(Exception):
                await self._own.close()


async def fetch(
    session: aiohttp.ClientSession, url: str, timeout: float
) -> tuple[bytes | None, str]:
    """The body of a 200 answer to GET `url`, or None and why not."""
    try:
        async with session.get(
            url, timeout=aiohttp.ClientTimeout(total=timeout), allow_redirects=False
        ) as response:
            if response.status != 200:
                return None, f"GET {url} answered HTTP {response.status}"
            chunks, size = [], 0
            async for chunk in response.content.iter_chunked(2**16):
                size += len(chunk)
                if size > MAX_ANSWER:
                    return None, f"GET {url}: the answer is over {MAX_ANSWER // 2**20} MiB"
                chunks.append(chunk)
            return b"".join(chunks), ""
    except TimeoutError:
        return None, f"GET {url}: no answer within {timeout:g}s"
    except (aiohttp.ClientError, OSError) as exc:
        return None, f"GET {url}: {type(exc).__name__}: {exc}"
