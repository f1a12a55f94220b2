"""Shared pieces of the ComfyUI process tests (`test_comfyui_*.py`).

The seed page runs ComfyUI as a docker container (`cmd: docker run --name comfyui-auto ...`,
`cmdStop: docker stop comfyui-auto`). The ComfyUI image cannot run here (it needs a GPU and a
registry), so these tests stand the ComfyUI-like upstream
(`tests/support/upstreams/comfyui_like.py`) in for ComfyUI's behaviour (its websocket, jobs,
assets): `cmd` runs it with a pidfile named after the model (the container name), and `cmdStop` is
the same script with `--stop-pidfile`, which stops it through that file as `docker stop <name>`
stops a container. The container side itself (a real `docker run` / `docker stop` on a real engine)
is tested in tests/real/test_docker.py. Everything else in the test configs is what the seed
page writes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.stack import PYTHON, UPSTREAMS, Stack, free_port_range

COMFYUI_LIKE = UPSTREAMS / "comfyui_like.py"
MODEL = "comfyui_auto"
IGNORED_PATH = f"model {MODEL} is not loaded; ignored ComfyUI paths cannot start it"
IGNORED_WS = f"model {MODEL} is not loaded; ignored websocket requests cannot start it"
NOT_FOUND = f"local model {MODEL} not found"
# What a browser's websocket handshake carries (aiohttp's client sends the same).
WS_HEADERS = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": base64.b64encode(b"swapd-comfyui-ws").decode(),
}


def free_port_run(count: int) -> int:
    """The first of `count` consecutive free ports: `${PORT}` is allocated from `startPort` upward
    in model-id order, and other test modules run stacks at the same time (`free_port_range`)."""
    return free_port_range(count)


class ComfyUpstream:
    """One ComfyUI-like model's files (all named after the model id, like the container)."""

    def __init__(self, base: Path, model_id: str) -> None:
        self.base = base
        self.model_id = model_id
        self.request_log = base / f"{model_id}.requests.jsonl"
        self.pidfile = base / f"{model_id}.pid"
        self.hold_file = base / f"{model_id}.hold"

    def cmd(
        self, *, status_interval: float = 0.2, job_steps: int = 3, step_delay: float = 0.05
    ) -> str:
        # ${MODEL_ID} is expanded by swapd, as in the seed's `--name ${MODEL_ID}`.
        base = self.base
        return (
            f"{PYTHON} {COMFYUI_LIKE} --port ${{PORT}} --name ${{MODEL_ID}}"
            f" --request-log {base}/${{MODEL_ID}}.requests.jsonl"
            f" --pidfile {base}/${{MODEL_ID}}.pid --hold-file {base}/${{MODEL_ID}}.hold"
            f" --status-interval {status_interval} --job-steps {job_steps}"
            f" --step-delay {step_delay}"
        )

    def cmd_stop(self) -> str:
        """Stands for `docker stop ${MODEL_ID}`."""
        return (
            f"{PYTHON} {COMFYUI_LIKE} --stop-pidfile {self.base}/${{MODEL_ID}}.pid --stop-timeout 5"
        )

    def events(self) -> list[dict[str, Any]]:
        if not self.request_log.exists():
            return []
        lines = self.request_log.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def mark(self) -> int:
        """A position in the log; `since(mark)` returns what happened after it."""
        return len(self.events())

    def since(self, mark: int) -> list[dict[str, Any]]:
        return self.events()[mark:]

    def starts_since(self, mark: int) -> int:
        return sum(1 for e in self.since(mark) if e["event"] == "start")

    def requests_since(self, mark: int) -> list[dict[str, Any]]:
        return [e for e in self.since(mark) if e["event"] == "request"]

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """While inside, a starting server stays in its loading phase (not listening yet)."""
        self.hold_file.touch()
        try:
            yield
        finally:
            self.hold_file.unlink(missing_ok=True)


def comfyui_model_yaml(up: ComfyUpstream, *, ttl: int = 0, extra: str = "", **cmd: Any) -> str:
    """The seed's `comfyui_auto` block with the container replaced by the ComfyUI-like upstream."""
    return f"""
  {up.model_id}:
    # ComfyUI has no /health; its root returns 200 once the server is up
    checkEndpoint: /
    cmdStop: {up.cmd_stop()}
    cmd: >
      {up.cmd(**cmd)}
    unloadTimeout: 5
    ttl: {ttl}
    unlisted: true
{extra}"""


class Running:
    """A module's stack plus async helpers that keep the event loop free (the stack's own calls
    are blocking subprocess runs)."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.url = stack.url

    async def status(self, model_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.stack.model, model_id)

    async def state(self, model_id: str) -> str:
        return str((await self.status(model_id))["state"])

    async def wait_state(self, model_id: str, state: str, timeout: float = 20.0) -> dict[str, Any]:
        return await asyncio.to_thread(self.stack.wait_state, model_id, state, timeout)

    async def unload(self, model_id: str) -> None:
        await asyncio.to_thread(self.stack.swapd, "unload", model_id)
        await self.wait_state(model_id, "stopped")


async def error_of(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    body = await resp.json(content_type=None)
    assert isinstance(body, dict) and "error" in body, body
    error = body["error"]
    assert isinstance(error, dict)
    return error


async def attempt(
    session: aiohttp.ClientSession,
    url: str,
    *,
    method: str = "GET",
    websocket: bool = False,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any] | None]:
    """Send one request (a websocket handshake when `websocket`), return (status, error or None)."""
    sent = {**(WS_HEADERS if websocket else {}), **(headers or {})}
    async with session.request(method, url, headers=sent, allow_redirects=False) as resp:
        if resp.status >= 400 and resp.content_type == "application/json":
            return resp.status, await error_of(resp)
        return resp.status, None


async def until(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    """Poll an (a)sync predicate with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.05)


async def closed(ws: aiohttp.ClientWebSocketResponse, timeout: float = 20.0) -> list[Any]:
    """Read until the socket closes (the messages read on the way); fail after `timeout`."""
    seen: list[Any] = []
    async with asyncio.timeout(timeout):
        while True:
            msg = await ws.receive()
            if msg.type in (
                aiohttp.WSMsgType.CLOSE,
                aiohttp.WSMsgType.CLOSED,
                aiohttp.WSMsgType.CLOSING,
            ):
                return seen
            if msg.type == aiohttp.WSMsgType.TEXT:
                seen.append(json.loads(msg.data))


@contextlib.asynccontextmanager
async def polling(
    session: aiohttp.ClientSession, url: str, every: float = 0.2
) -> AsyncIterator[list[int]]:
    """GET `url` every `every` seconds in the background, as an open page does.

    Yields the list of statuses seen so far (it grows while the block runs)."""
    statuses: list[int] = []

    async def loop() -> None:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url) as resp:
                    await resp.read()
                    statuses.append(resp.status)
            await asyncio.sleep(every)

    task = asyncio.get_running_loop().create_task(loop())
    try:
        yield statuses
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
