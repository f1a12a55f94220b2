"""The ComfyUI-like test upstream itself, run directly (no swapd).

The other ComfyUI tests lean on it behaving like the real server (no /health, a page at /, assets,
a websocket that stays open and reports job progress), so that is checked here first."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.paths import UPSTREAMS
from tests.support.ports import free_port

UPSTREAM = UPSTREAMS / "comfyui_like.py"

pytestmark = pytest.mark.processes


class Server:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "requests.jsonl"
        self.pidfile = tmp / "comfyui.pid"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(UPSTREAM),
                "--port",
                str(self.port),
                "--status-interval",
                "0.2",
                "--job-steps",
                "3",
                "--step-delay",
                "0.05",
                "--request-log",
                str(self.log),
                "--pidfile",
                str(self.pidfile),
            ],
            stdout=subprocess.DEVNULL,
        )

    def events(self) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = Server(tmp_path)
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 10
            while True:
                try:
                    async with session.get(srv.url + "/") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                assert time.monotonic() < deadline, "comfyui_like did not start"
                assert srv.proc.poll() is None, "comfyui_like exited"
                await asyncio.sleep(0.05)
        yield srv
    finally:
        srv.proc.kill()
        srv.proc.wait()


async def test_page_assets_and_no_health(server: Server) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(server.url + "/") as resp:
            assert resp.status == 200
            assert resp.content_type == "text/html"
            assert "ComfyUI" in await resp.text()
        async with session.get(server.url + "/health") as resp:
            assert resp.status == 404
        for path, kind in [
            ("/scripts/app.js", "application/javascript"),
            ("/style.css", "text/css"),
            ("/templates/default.json", "application/json"),
        ]:
            async with session.get(server.url + path) as resp:
                assert resp.status == 200, path
                assert resp.content_type == kind
        async with session.get(server.url + "/api/userdata/workflows%2Fmine.json") as resp:
            assert resp.status == 200
            body = await resp.json()
            assert body["raw_path"] == "/api/userdata/workflows%2Fmine.json"
        async with session.get(server.url + "/ws") as resp:
            assert resp.status == 400  # a plain GET without upgrade headers
    paths = [e["raw_path"] for e in server.events() if e["event"] == "request"]
    # The fixture's readiness polls come first; then exactly what this test sent, in order.
    assert paths[-7:] == [
        "/",
        "/health",
        "/scripts/app.js",
        "/style.css",
        "/templates/default.json",
        "/api/userdata/workflows%2Fmine.json",
        "/ws",
    ]


async def test_prompt_runs_a_job_reported_over_the_websocket(server: Server) -> None:
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(server.url + "/ws?clientId=tab1")
        first = await ws.receive_json(timeout=5)
        assert first["type"] == "status"
        assert first["data"]["sid"] == "tab1"
        async with session.post(
            server.url + "/api/prompt", json={"prompt": {}, "client_id": "tab1"}
        ) as resp:
            prompt_id = (await resp.json())["prompt_id"]
        progress = []
        while True:
            msg = await ws.receive_json(timeout=5)
            if msg["type"] == "progress":
                progress.append(msg["data"]["value"])
            if msg["type"] == "executing" and msg["data"]["node"] is None:
                assert msg["data"]["prompt_id"] == prompt_id
                break
        assert progress == [1, 2, 3]
        async with session.get(server.url + "/api/jobs") as resp:
            jobs = (await resp.json())["jobs"]
            assert [j["status"] for j in jobs] == ["done"]
        async with session.get(server.url + "/api/queue") as resp:
            assert await resp.json() == {"queue_running": [], "queue_pending": []}
        # Status messages keep coming on the interval while the socket stays open.
        statuses = 0
        while statuses < 2:
            if (await ws.receive_json(timeout=5))["type"] == "status":
                statuses += 1
        assert not ws.closed
        await ws.close()


async def test_stop_by_pidfile_stops_the_server_and_its_websockets(server: Server) -> None:
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(server.url + "/ws")
        await ws.receive_json(timeout=5)
        stop = await asyncio.create_subprocess_exec(
            sys.executable, str(UPSTREAM), "--stop-pidfile", str(server.pidfile)
        )
        assert await asyncio.wait_for(stop.wait(), 15) == 0
        # Status messages already on their way come first; then the server's close.
        ends = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED)
        async with asyncio.timeout(5):
            while (msg := await ws.receive()).type not in ends:
                assert msg.type == aiohttp.WSMsgType.TEXT
    assert server.proc.wait(timeout=5) == 0  # SIGTERM was enough; SIGKILL would read -9
    assert not server.pidfile.exists()
    assert [e["event"] for e in server.events()][-1] == "exit"
