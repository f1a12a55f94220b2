"""llama-swap's own web UI against the real stack, read the way its sources read it
(tests/support/llama_ui.py lists the fields and types, from its `types.ts` and `api.ts`): every
`/api/events` message and every endpoint the UI reads has llama-swap's shape and meaning
(issue 25). tests/support/upstreams/fake_model.py stands for llama-server.

* `uiConfig` is the config's `ui` (the in-flight table reads `activity.session_id` from it);
* `modelStatus` carries the capability flags and context length, and llama-swap's states: a
  failed start reads `stopped` (so the UI's Load, `GET /upstream/<id>/`, is sent, and it tries
  again), swapd's own state beside it as `swapd_state`;
* an in-flight entry carries the request's headers (user agent, session; secrets redacted), its
  RFC 3339 time, and the response's headers and bytes as they stream;
* the activity log holds what llama-swap's holds: POSTs to model routes, `/upstream/` ones only
  to a model route's path; not GETs, not the UI's Load;
* the first `logData` of the upstream log is in the order the lines came, not model by model;
* `/running` lists llama-swap's fields, and a failed start is not running.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import llama_ui
from tests.support.llama_ui import check
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, fake_model_cmd, wait_for

pytestmark = pytest.mark.processes

KEY = "sk-ui-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = "/v1/chat/completions"

RUNNING_ITEM = llama_ui.Obj(
    {
        "model": llama_ui.STR,
        "state": llama_ui.MODEL_STATE,
        "cmd": llama_ui.STR,
        "proxy": llama_ui.STR,
        "ttl": llama_ui.NUM,
        "name": llama_ui.STR,
        "description": llama_ui.STR,
    }
)


@pytest.fixture
def stack(stack_factory: Callable[..., Stack], tmp_path: Path) -> Stack:
    a, b, flaky = model_ports(3)
    # Fails its first start (exit 3), serves from the second on: a start to retry.
    flag = tmp_path / "started-once"
    then = fake_model_cmd("flaky", port=str(flaky))
    flaky_cmd = shlex.join(
        ["sh", "-c", f"if [ -e {flag} ]; then exec {then}; else touch {flag}; exit 3; fi"]
    )
    return stack_factory(
        {
            "healthCheckTimeout": 15,
            "apiKeys": [KEY],
            "ui": {"activity": {"session_id": ["X-Session-ID", "X-Conversation"]}},
            "groups": {"all": {"swap": False, "members": ["a", "b", "flaky"]}},
            "models": {
                "a": {
                    **local_model("a", a),
                    "name": "Model A",
                    "capabilities": {
                        "in": ["text", "image"],
                        "out": ["text"],
                        "tools": True,
                        "context": 8192,
                    },
                },
                "b": local_model("b", b),
                "flaky": {"cmd": flaky_cmd, "proxy": f"http://127.0.0.1:{flaky}"},
            },
        }
    )


def _get(stack: Stack, path: str) -> Any:
    request = urllib.request.Request(stack.url + path, headers=AUTH)
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.load(resp)


def _status(stack: Stack, path: str, method: str = "GET", body: Any = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    headers = {**AUTH, "Content-Type": "application/json"}
    request = urllib.request.Request(stack.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_events_and_in_flight_entries_as_the_ui_reads_them(stack: Stack) -> None:
    async with (
        aiohttp.ClientSession(headers=AUTH) as session,
        session.get(stack.url + "/api/events") as resp,
    ):
        assert resp.status == 200
        stream = llama_ui.events(resp)
        first = [await anext(stream) for _ in range(6)]
        kinds = [kind for kind, _ in first]
        assert kinds == ["logData", "logData", "modelStatus", "uiConfig", "profileChanged",
                         "inflight"]  # fmt: skip
        # The UI reads `uiConfig.activity.session_id`; swapd once sent `{}`, and it threw.
        assert first[3][1] == {"activity": {"session_id": ["X-Session-ID", "X-Conversation"]}}
        models = {m["id"]: m for m in first[2][1]}
        assert models["a"]["capabilities"] == {"vision": True, "function_calling": True}
        assert models["a"]["context_length"] == 8192 and models["a"]["name"] == "Model A"
        assert "capabilities" not in models["b"] and "context_length" not in models["b"]

        # A streamed chat that takes a while, with the headers the UI shows.
        body = {"model": "a", "messages": [], "stream": True, "x_chunks": 6, "x_delay": 0.4}
        headers = {
            "User-Agent": "ui-test-agent/1.0",
            "X-Session-ID": "chat-7",  # "session" in its name: once read [REDACTED]
            "X-Conversation": "conv-42",
            "X-Note": f"holds {KEY} inside",  # a configured key, wherever it is, is redacted
        }

        async def chat() -> bytes:
            async with session.post(stack.url + CHAT, json=body, headers=headers) as r:
                assert r.status == 200
                return await r.read()

        task = asyncio.ensure_future(chat())
        upserts: list[dict[str, Any]] = []
        removed: list[str] = []
        deadline = time.monotonic() + 60
        while not removed and time.monotonic() < deadline:
            kind, data = await asyncio.wait_for(anext(stream), 60)
            if kind == "inflight" and data["operation"] == "upsert":
                upserts.append(data["request"])
            elif kind == "inflight" and data["operation"] == "remove":
                removed.append(data["id"])
        streamed = await task

    assert upserts and removed == [upserts[0]["id"]]
    entry = upserts[0]
    assert entry["model"] == "a" and entry["method"] == "POST" and entry["req_path"] == CHAT
    # `requestHeader(req_headers, "User-Agent")` and `sessionID(req_headers, session_id)`, as the
    # activity table reads them (names compared without case).
    got = {k.lower(): v for k, v in entry["req_headers"].items()}
    assert got["user-agent"] == "ui-test-agent/1.0" and got["x-conversation"] == "conv-42"
    sessions = first[3][1]["activity"]["session_id"]
    assert llama_ui.session_id(entry["req_headers"], sessions) == "chat-7"
    assert got["authorization"] == "[REDACTED]" and got["x-note"] == "[REDACTED]"
    assert KEY not in json.dumps(upserts)
    # The UI sorts rows by `Date.parse(timestamp)`, and counts `elapsed_ms` on from receipt.
    assert abs(llama_ui.parse_date(entry["timestamp"]).timestamp() - time.time()) < 300
    assert isinstance(entry["elapsed_ms"], int) and entry["remote_ip"] == "127.0.0.1"
    # As the response streams, its head and then its bytes come in later upserts.
    later = upserts[-1]
    assert later["id"] == entry["id"]
    assert 0 < later["resp_bytes"] <= len(streamed)
    assert later["resp_headers"].get("Content-Type", "").startswith("text/event-stream")
    sizes = [u["resp_bytes"] for u in upserts]
    assert sizes == sorted(sizes) and len(set(sizes)) >= 2, sizes


async def test_a_failed_start_reads_stopped_and_the_uis_load_retries_it(stack: Stack) -> None:
    # The UI's Load: `fetch('/upstream/<id>/?_=<now>')`; the first start exits 3.
    assert _status(stack, "/upstream/flaky/?_=1") == 502
    stack.wait_state("flaky", "failed")
    async with (
        aiohttp.ClientSession(headers=AUTH) as session,
        session.get(stack.url + "/api/events") as resp,
    ):
        stream = llama_ui.events(resp)
        # The daemon said `failed` to the status request; the proxy's copy follows its event
        # stream, which may come a moment later (a later `modelStatus` then carries it).
        flaky: dict[str, Any] = {}
        async with asyncio.timeout(15):
            while flaky.get("swapd_state") != "failed":
                kind, data = await anext(stream)
                if kind == "modelStatus":
                    flaky = next(m for m in data if m["id"] == "flaky")
        # `onToggleLoad` sends Load for "stopped" only: "failed" was a dead button.
        assert flaky["state"] == "stopped"
    running = _get(stack, "/running")
    assert [m["model"] for m in running["running"]] == []
    assert [f["model"] for f in running["failed"]] == ["flaky"]
    # Load again: the start is tried again, and it serves.
    assert _status(stack, f"/upstream/flaky/?_={int(time.time())}") == 200
    stack.wait_state("flaky", "ready")
    running = _get(stack, "/running")["running"]
    assert [m["model"] for m in running] == ["flaky"]
    check(running[0], RUNNING_ITEM, "/running")
    assert running[0]["state"] == "ready" and running[0]["swapd_state"] == "ready"
    assert running[0]["cmd"].startswith("sh -c ")


def test_the_activity_log_holds_what_llama_swaps_holds(stack: Stack) -> None:
    def rows() -> list[dict[str, Any]]:
        page = _get(stack, "/api/metrics/activity?limit=999&order=asc")
        check(page, llama_ui.ACTIVITY_PAGE, "activity")
        return list(page["data"])

    chat = {"model": "a", "messages": []}
    assert _status(stack, "/upstream/a/?_=1") == 200  # the UI's Load
    assert _status(stack, "/upstream/a/slow?n=2&delay=0") == 200  # a GET of a model's page
    assert _status(stack, "/upstream/a/echo", "POST", chat) == 200  # a POST below no model route
    assert _status(stack, "/props?model=a") == 200  # a GET model route
    # No model: refused before llama-swap's metrics middleware, so never in its log (issue 41).
    assert _status(stack, CHAT, "POST", {"messages": []}) == 400
    assert rows() == []
    assert _status(stack, CHAT, "POST", chat) == 200
    assert _status(stack, "/upstream/b" + CHAT, "POST", {"messages": []}) == 200

    def two() -> list[dict[str, Any]] | None:
        found = rows()
        return found if len(found) == 2 else None

    found = wait_for(two, 10, what="two records")
    assert found is not None
    assert [(r["model"], r["req_path"]) for r in found] == [
        ("a", CHAT),
        ("b", "/upstream/b" + CHAT),
    ]

    # swapd's own /metrics still counts every request, the unlisted ones too: the three to
    # `/upstream/a/` (the Load, the page, the POST below no model route).
    def metrics() -> str:
        request = urllib.request.Request(stack.url + "/metrics", headers=AUTH)
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.read().decode()

    line = 'swapd_requests_total{model="a",route="upstream",status="200"} 3.0'
    wait_for(lambda: line in metrics(), 10, what="the unlisted requests counted")


def test_the_upstream_history_is_in_the_order_the_lines_came(stack: Stack) -> None:
    def logged(tag: str) -> None:
        request = urllib.request.Request(stack.url + "/logs", headers=AUTH)
        with urllib.request.urlopen(request, timeout=10) as resp:
            body = resp.read().decode()
        assert f"slow {tag}: finished" in body

    for model, tag in (("a", "first-in-a"), ("b", "second-in-b"), ("a", "third-in-a")):
        assert _status(stack, f"/upstream/{model}/slow?n=0&delay=0&tag={tag}") == 200
        wait_for(partial(_quiet, logged, tag), 10, what=f"{tag} in the combined log")

    async def history() -> str:
        async with (
            aiohttp.ClientSession(headers=AUTH) as session,
            session.get(stack.url + "/api/events") as resp,
        ):
            stream = llama_ui.events(resp)
            async for kind, data in stream:
                if kind == "logData" and data["source"] == "upstream":
                    return str(data["data"])
        raise AssertionError("no upstream history")

    text = asyncio.run(history())
    where = [text.index(f"slow {tag}: finished") for tag in ("first-in-a", "second-in-b",
                                                             "third-in-a")]  # fmt: skip
    assert where == sorted(where), text


def _quiet(probe: Callable[[str], None], tag: str) -> bool:
    try:
        probe(tag)
    except AssertionError:
        return False
    return True


def test_version_and_the_endpoints_the_ui_reads_first(stack: Stack) -> None:
    check(_get(stack, "/api/version"), llama_ui.VERSION, "/api/version")
    check(_get(stack, "/api/profiles"), llama_ui.Obj({"active": llama_ui.Null(llama_ui.STR),
                                                      "profiles": llama_ui.Arr(llama_ui.Obj(
                                                          {"id": llama_ui.STR}))}))  # fmt: skip


@pytest.mark.parametrize(
    ("accept", "content_type", "body"),
    [
        ("text/plain", "text/plain", "swapd: model <nope> not found"),
        (
            "text/html,application/xhtml+xml,*/*;q=0.8",  # a browser's
            "text/html",
            "<html><body><h1>swapd</h1><p>model &lt;nope&gt; not found</p></body></html>",
        ),
    ],
)
def test_an_error_comes_in_the_shape_accept_asks_for(
    stack: Stack, accept: str, content_type: str, body: str
) -> None:
    # llama-swap's `SendResponse`: text/plain named first, then text/html, else its JSON.
    data = json.dumps({"model": "<nope>", "messages": []}).encode()
    headers = {**AUTH, "Content-Type": "application/json", "Accept": accept}
    request = urllib.request.Request(stack.url + CHAT, data=data, headers=headers)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 404
    assert refused.value.headers["Content-Type"].split(";")[0] == content_type
    assert refused.value.read().decode() == body
    headers["Accept"] = "application/json"
    request = urllib.request.Request(stack.url + CHAT, data=data, headers=headers)
    with pytest.raises(urllib.error.HTTPError) as as_json:
        urllib.request.urlopen(request, timeout=30)
    assert json.load(as_json.value)["error"]["code"] == "not_found"
