"""Captures (`captureBuffer`) against the real stack: `GET /api/captures/{id}` in llama-swap's
shape (bodies base64, secret headers redacted) for a non-streamed and a streamed response, the
bound on one capture and on all of them (oldest evicted first), a stream larger than the bound
still relayed whole, 404/400, API keys, and `captureBuffer: 0`.
tests/support/upstreams/fake_model.py stands for llama-server."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.processes

CHAT = "/v1/chat/completions"
KEY = "sk-capture-test"
MB = 1024 * 1024


def _call(
    stack: Stack, path: str, body: bytes | None = None, key: str | None = KEY
) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(
        stack.url + path, data=body, headers=headers, method="POST" if body else "GET"
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _chat(stack: Stack, body: dict[str, Any]) -> tuple[bytes, bytes]:
    sent = json.dumps(body).encode()
    status, answer = _call(stack, CHAT, sent)
    assert status == 200, answer
    return sent, answer


def _records(stack: Stack, count: int) -> list[dict[str, Any]]:
    """The newest `count` records, oldest first, once they are all stored (100 ms batches)."""

    def ready() -> list[dict[str, Any]] | None:
        status, raw = _call(stack, "/api/metrics/activity?limit=999&order=asc")
        assert status == 200, raw
        data = json.loads(raw)["data"]
        return data[-count:] if len(data) >= count else None

    return wait_for(ready, 10, what=f"{count} activity records")


def _capture(stack: Stack, record_id: int) -> tuple[int, dict[str, Any]]:
    status, raw = _call(stack, f"/api/captures/{record_id}")
    return status, json.loads(raw)


def _blob(n: int) -> bytes:
    return (bytes(range(256)) * (n // 256 + 1))[:n]


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    (port,) = model_ports(1)
    return stack_factory(
        {
            "healthCheckTimeout": 15,
            "apiKeys": [KEY],
            "captureBuffer": 1,
            "models": {"alpha": local_model("alpha", port)},
        }
    )


def test_plain_and_streamed_captures(stack: Stack) -> None:
    sent, answer = _chat(stack, {"model": "alpha", "messages": [{"role": "user", "content": "hi"}]})
    streamed_sent, streamed = _chat(
        stack,
        {"model": "alpha", "stream": True, "x_chunks": 40, "messages": [], "x_tag": "cap"},
    )
    plain, stream = _records(stack, 2)
    assert plain["has_capture"] and stream["has_capture"]

    status, cap = _capture(stack, plain["id"])
    assert status == 200, cap
    assert set(cap) == {"id", "req_path", "req_headers", "req_body", "resp_headers", "resp_body"}
    assert cap["id"] == plain["id"] and cap["req_path"] == CHAT
    assert base64.b64decode(cap["req_body"]) == sent  # as the client sent it, byte for byte
    assert base64.b64decode(cap["resp_body"]) == answer
    assert cap["req_headers"]["Authorization"] == "[REDACTED]"
    assert KEY not in json.dumps(cap)
    assert cap["resp_headers"]["Content-Type"].startswith("application/json")

    status, cap = _capture(stack, stream["id"])
    assert status == 200, cap
    assert base64.b64decode(cap["req_body"]) == streamed_sent
    body = base64.b64decode(cap["resp_body"])
    assert body == streamed  # every SSE chunk relayed, in order, through the final [DONE]
    assert body.count(b"chat.completion.chunk") == 41 and body.endswith(b"data: [DONE]\n\n")
    assert cap["resp_headers"]["Content-Type"] == "text/event-stream"


def test_size_bounds_and_eviction(stack: Stack) -> None:
    # 300 000 bytes streams (over the relay's one-write bound) and fits; 1.1 MB does not fit
    # in the 1 MiB buffer: it is relayed whole all the same, and not captured.
    _, answer = _chat(stack, {"model": "alpha", "x_blob": 300_000})
    assert answer == _blob(300_000)
    _, answer = _chat(stack, {"model": "alpha", "x_blob": 1_100_000})
    assert answer == _blob(1_100_000)
    fits, too_big = _records(stack, 2)
    assert fits["has_capture"] and not too_big["has_capture"]
    status, cap = _capture(stack, fits["id"])
    assert status == 200 and base64.b64decode(cap["resp_body"]) == _blob(300_000)
    assert _capture(stack, too_big["id"])[0] == 404

    # Three of 400 000 bytes: only two fit with the first one, so the oldest goes first.
    for _ in range(3):
        _chat(stack, {"model": "alpha", "x_blob": 400_000})
    first, second, third = _records(stack, 3)
    assert [r["has_capture"] for r in _records(stack, 5)] == [False, False, False, True, True]
    assert _capture(stack, fits["id"])[0] == 404
    assert _capture(stack, first["id"])[0] == 404
    for kept in (second, third):
        status, cap = _capture(stack, kept["id"])
        assert status == 200 and base64.b64decode(cap["resp_body"]) == _blob(400_000)


def test_errors_and_keys(stack: Stack) -> None:
    _chat(stack, {"model": "alpha", "messages": []})
    (record,) = _records(stack, 1)
    status, raw = _call(stack, f"/api/captures/{record['id']}", key=None)
    assert status == 401, raw
    status, raw = _call(stack, f"/api/captures/{record['id']}", key="sk-wrong")
    assert status == 401, raw
    status, raw = _call(stack, "/api/captures/999999")
    assert status == 404 and b"capture not found" in raw
    status, raw = _call(stack, "/api/captures/abc")
    assert status == 400 and b"invalid capture ID" in raw


def test_no_captures_when_zero(stack_factory: Callable[..., Stack]) -> None:
    (port,) = model_ports(1)
    stack = stack_factory(
        {
            "healthCheckTimeout": 15,
            "apiKeys": [KEY],
            "captureBuffer": 0,
            "models": {"alpha": local_model("alpha", port)},
        }
    )
    _chat(stack, {"model": "alpha", "messages": []})
    (record,) = _records(stack, 1)
    assert record["has_capture"] is False
    assert _capture(stack, record["id"])[0] == 404


def test_keys_are_redacted_by_value_in_any_header(stack_factory: Callable[..., Stack]) -> None:
    """Issue 29, finding 6: captures redacted headers by name only, so a configured key sent in
    `X-Custom-Auth:` or Azure's `api-key:` was shown in `/api/captures/N` and in the UI."""
    (port,) = model_ports(1)
    other_key, peer_key = "sk-second-client-key", "sk-the-peers-own-key"
    stack = stack_factory(
        {
            "healthCheckTimeout": 15,
            "apiKeys": [KEY, other_key],
            "peers": {"far": {"proxy": "http://127.0.0.1:9", "models": ["x"], "apiKey": peer_key}},
            "models": {"alpha": local_model("alpha", port)},
        }
    )
    headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {KEY}",
        "api-key": KEY,  # Azure OpenAI's header
        "X-Custom-Auth": other_key,
        "X-Pass-Along": f"Bearer {peer_key}",  # no credential in the name: the value tells
        "x-goog-api-key": "AIza-not-configured",  # Gemini's: redacted by its name
        "X-Trace": "trace-1234",
    }
    body = json.dumps({"model": "alpha", "messages": []}).encode()
    req = urllib.request.Request(stack.url + CHAT + f"?key={other_key}", data=body, headers=headers)
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
    (record,) = _records(stack, 1)
    status, cap = _capture(stack, record["id"])
    assert status == 200, cap
    shown = json.dumps(cap)
    for secret in (KEY, other_key, peer_key, "AIza-not-configured"):
        assert secret not in shown
        assert secret not in json.dumps(record)
    kept = {k.lower(): v for k, v in cap["req_headers"].items()}
    for name in ("api-key", "x-custom-auth", "x-pass-along", "x-goog-api-key"):
        assert kept[name] == "[REDACTED]"
    assert kept["x-trace"] == "trace-1234"
    assert cap["req_path"] == CHAT  # the path without its query
