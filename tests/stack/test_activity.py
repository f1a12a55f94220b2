"""The activity log against the real stack: one record per model request, with the token counts
and speeds the upstream reported (tests/support/upstreams/fake_model.py stands for llama-server:
OpenAI `usage` plus llama.cpp `timings`, at 100 prompt and 50 generated tokens/s), for a streamed
and a non-streamed response; `GET /api/metrics/activity`'s filters, pagination and llama-swap's
validation messages; `GET /api/metrics/stats`; the `metricsMaxInMemory` bound."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.proxy import RawConnection, local_model, model_ports
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.processes

CHAT = "/v1/chat/completions"


def _post(stack: Stack, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    req = urllib.request.Request(
        stack.url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _activity(stack: Stack, newest: int) -> list[dict[str, Any]]:
    """The records kept, newest first, once record `newest` is among them (records arrive in
    100 ms batches)."""

    def ready() -> list[dict[str, Any]] | None:
        status, page = stack.get_json("/api/metrics/activity?limit=999")
        assert status == 200, page
        return page["data"] if page["data"] and page["data"][0]["id"] >= newest else None

    return wait_for(ready, 10, what=f"activity record {newest}")


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    (port,) = model_ports(1)
    return stack_factory(
        {
            "healthCheckTimeout": 15,
            "metricsMaxInMemory": 6,
            "models": {"alpha": local_model("alpha", port, aliases=["alpha-alias"])},
        }
    )


def test_records_with_tokens_from_plain_and_streamed_responses(stack: Stack) -> None:
    status, body = _post(stack, CHAT, {"model": "alpha-alias", "messages": []})
    assert status == 200
    status, streamed = _post(
        stack,
        CHAT,
        {
            "model": "alpha",
            "stream": True,
            "stream_options": {"include_usage": True},
            "x_chunks": 4,
        },
    )
    assert status == 200 and b"data: [DONE]" in streamed
    status, _ = _post(stack, CHAT, {"model": "nope"})
    assert status == 404

    newest_first = _activity(stack, 3)
    missing, stream, plain = newest_first[:3]
    assert [r["id"] for r in (plain, stream, missing)] == sorted(r["id"] for r in newest_first)

    assert plain["model"] == "alpha" and plain["model_asked"] == "alpha-alias"
    assert plain["route"] == "model" and plain["method"] == "POST"
    assert plain["req_path"] == CHAT and plain["resp_status_code"] == 200
    assert plain["bytes"] == len(body)
    assert plain["resp_content_type"].startswith("application/json")
    # The first request waited for alpha's start; the second found it ready.
    assert plain["wait_ms"] > 0 and stream["wait_ms"] == 0
    assert 0 <= plain["ttfb_ms"] <= plain["duration_ms"]
    assert plain["tokens"] == {
        "cache_tokens": 0,
        "draft_tokens": -1,
        "draft_acc_tokens": -1,
        "input_tokens": 1,
        "output_tokens": 3,
        "prompt_per_second": 100.0,
        "tokens_per_second": 50.0,
    }
    assert plain["timestamp"].endswith("Z") and "error_msg" not in plain

    assert stream["resp_content_type"].startswith("text/event-stream")
    assert stream["bytes"] == len(streamed)
    assert stream["tokens"]["input_tokens"] == 7
    assert stream["tokens"]["output_tokens"] == 4
    assert stream["tokens"]["tokens_per_second"] == 50.0
    # timings' cache_n (0) wins over usage's cached_tokens (2), as in llama-swap.
    assert stream["tokens"]["cache_tokens"] == 0

    assert missing["resp_status_code"] == 404 and missing["model"] == "nope"
    assert "nope" in missing["error_msg"]
    assert missing["tokens"]["input_tokens"] == -1

    status, stats = stack.get_json("/api/metrics/stats?model=alpha")
    assert status == 200
    assert stats["total_requests"] == 2
    assert stats["total_input_tokens"] == 8 and stats["total_output_tokens"] == 7
    assert stats["gen_histogram"]["bins"] == [2] and stats["gen_histogram"]["p50"] == 50.0


def test_filters_pagination_errors_and_bound(stack: Stack) -> None:
    for _ in range(8):
        assert _post(stack, CHAT, {"model": "alpha", "messages": []})[0] == 200
    assert _post(stack, CHAT, {"model": "nope"})[0] == 404
    records = _activity(stack, 9)
    # metricsMaxInMemory: 6 keeps the newest six of the nine.
    assert len(records) == 6 and records[0]["id"] == 9 and records[-1]["id"] == 4

    status, page = stack.get_json("/api/metrics/activity?model=alpha&limit=2&page=2&order=asc")
    assert status == 200
    assert (page["page"], page["limit"], page["total"], page["total_pages"]) == (2, 2, 5, 3)
    assert [r["id"] for r in page["data"]] == [6, 7]
    status, page = stack.get_json("/api/metrics/activity?min_id=5&max_id=6")
    assert [r["id"] for r in page["data"]] == [6, 5]
    status, page = stack.get_json("/api/metrics/activity?sort=resp_status_code&limit=1")
    assert page["data"][0]["resp_status_code"] == 404

    for query, message in (
        ("limit=0", "limit must be between 1 and 999"),
        ("limit=x", "invalid limit"),
        ("page=0", "page must be >= 1"),
        ("sort=bogus", "invalid sort column"),
        ("order=up", "order must be asc or desc"),
        ("min_id=-1", "min_id must be >= 1"),
        ("min_id=5&max_id=2", "min_id must be <= max_id"),
        ("start=yesterday", "invalid 'start' timestamp, use RFC3339 format"),
        ("start=2026-01-02T00:00:00Z&end=2026-01-01T00:00:00Z", "start must be before end"),
    ):
        status, error = stack.get_json("/api/metrics/activity?" + query)
        assert status == 400, query
        assert error["error"]["message"] == message
    status, page = stack.get_json("/api/metrics/activity?start=2999-01-01T00:00:00Z")
    assert status == 200 and page["total"] == 0 and page["total_pages"] == 0


async def test_a_header_byte_that_is_not_utf8_costs_no_other_record(
    stack_factory: Callable[..., Stack],
) -> None:
    """A non-UTF-8 byte in a slow request's header killed the proxy's report (msgpack refuses
    aiohttp's surrogate escapes): every record of that proxy's last 100 ms was lost (issue 40,
    item 4). Here 20 requests finish while the odd one streams: all 21 records are kept."""
    (port,) = model_ports(1)
    stack = stack_factory(
        {
            "healthCheckTimeout": 15,
            "models": {"alpha": local_model("alpha", port, concurrencyLimit=50)},
        }
    )
    assert (await asyncio.to_thread(_post, stack, CHAT, {"model": "alpha"}))[0] == 200
    body = json.dumps({"model": "alpha", "stream": True, "x_chunks": 10, "x_delay": 0.1}).encode()
    head = (
        b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: swapd\r\nContent-Type: application/json\r\n"
        b"User-Agent: caf\xe9\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    odd = await RawConnection.open(stack.url)
    try:
        await odd.send(head + body)
        quick = [asyncio.to_thread(_post, stack, CHAT, {"model": "alpha"}) for _ in range(20)]
        assert {status for status, _ in await asyncio.gather(*quick)} == {200}
        assert (await odd.response(30)).status == 200
    finally:
        await odd.close()
    records = await asyncio.to_thread(_activity, stack, 22)
    assert len(records) == 22
    assert sum(r["resp_content_type"].startswith("text/event-stream") for r in records) == 1
