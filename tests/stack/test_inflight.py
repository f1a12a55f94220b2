"""`GET /api/inflight`, `POST /api/inflight/{id}/cancel` and `GET /api/version` against the
real stack with two proxy processes: a streaming request is listed whichever process answers,
and a cancel sent to either process ends its upstream exchange (the model sees its client go)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from swapd.ipc.build_info import checkout_commit
from swapd.proxy.dialects.ollama import values as ollama_values
from tests.support.proxy import local_model, model_log_has, model_ports
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.processes

CHAT = "/v1/chat/completions"


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    (port,) = model_ports(1)
    return stack_factory(
        {"healthCheckTimeout": 15, "models": {"m": local_model("m", port)}}, proxy_processes=2
    )


def _cancel(stack: Stack, flight: str) -> tuple[int, Any]:
    req = urllib.request.Request(stack.url + f"/api/inflight/{flight}/cancel", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


async def test_list_and_cancel_from_either_process(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        for n in range(3):
            tag = f"t{n}"
            body = {"model": "m", "stream": True, "x_chunks": 200, "x_delay": 0.05, "x_tag": tag}
            async with session.post(stack.url + CHAT, json=body) as resp:
                assert resp.status == 200
                await resp.content.readline()  # under way

                def listed() -> dict[str, Any] | None:
                    found = stack.get_ok("/api/inflight")["requests"]
                    return found[0] if found else None

                entry = await asyncio.to_thread(wait_for, listed, 10, what="the request listed")
                assert entry["model"] == "m" and entry["req_path"] == CHAT
                assert entry["method"] == "POST" and entry["id"].startswith(entry["proxy_id"])
                # Both processes list it (the daemon collects every proxy's table).
                for _ in range(4):
                    assert stack.get_ok("/api/inflight")["requests"][0]["id"] == entry["id"]
                status, answer = await asyncio.to_thread(_cancel, stack, entry["id"])
                assert (status, answer) == (200, {"msg": "ok"})
                with pytest.raises(aiohttp.ClientPayloadError):
                    await resp.read()  # cut off, far short of 200 chunks at 20 a second
            await asyncio.to_thread(model_log_has, stack, "m", f"chat {tag}: client gone")
            await asyncio.to_thread(
                wait_for,
                lambda: not stack.get_ok("/api/inflight")["requests"],
                10,
                what="the request gone from the table",
            )
    status, error = _cancel(stack, "nope-1")
    assert status == 404 and error["error"]["message"] == "inflight request not found"


def test_version(stack: Stack) -> None:
    """llama-swap's fields: the checkout's commit (these tests run in one), the install's date
    in RFC 3339. With Ollama's API on (the default) `version` is the Ollama API version swapd
    answers as, and swapd's own is beside it (off: tests/stack/test_ollama_api.py)."""
    version = stack.get_ok("/api/version")
    assert version["version"] == ollama_values.API_VERSION
    assert version["swapd_version"] == "0.1.0"
    assert version["commit"] == checkout_commit(Path(__file__).resolve())
    assert datetime.fromisoformat(version["build_date"].replace("Z", "+00:00")).year >= 2024
