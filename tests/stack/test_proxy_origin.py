"""Cross-site state changes refused (proxy/origin_check.py), over raw HTTP against the real stack:
a non-GET on swapd's own `/api/...` or `/unload` whose `Origin` names another host:port than its
`Host` gets a 403 in the OpenAI error shape and changes nothing; the same request with this host's
Origin, or with none (curl, SDKs), is served; model routes, `/upstream/` and reads are not
checked (a faithful proxy forwards the Origin to the upstream untouched)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from typing import Any

import pytest

from swapd.proxy.origin_check import changes_state, guarded, same_origin
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack

pytestmark = pytest.mark.processes

EVIL = "http://evil.example:8080"


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    a, b = model_ports(2)
    return stack_factory(
        {
            "models": {"a": local_model("a", a), "b": local_model("b", b)},
            "profiles": {"quiet": {"pins": {"b": ""}}},
        }
    )


def _raw(
    stack: Stack,
    method: str,
    path: str,
    origin: str | None,
    body: Any = None,
    site: str | None = None,
) -> tuple[int, dict[str, Any]]:
    host, port = stack.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Content-Type": "application/json"}
    if origin is not None:
        headers["Origin"] = origin
    if site is not None:
        headers["Sec-Fetch-Site"] = site
    try:
        data = json.dumps(body).encode() if body is not None else b""
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        text = response.read()
        if not response.getheader("Content-Type", "").startswith("application/json"):
            return response.status, {"text": text.decode()}  # GET /unload answers plain text
        return response.status, json.loads(text) if text else {}
    finally:
        conn.close()


def _chat(stack: Stack, model: str, origin: str | None = None) -> tuple[int, dict[str, Any]]:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return _raw(stack, "POST", "/v1/chat/completions", origin, body)


def test_the_rule() -> None:
    assert guarded("POST", "/api/models/unload/a") and guarded("PUT", "/api/profiles/active")
    assert guarded("DELETE", "/api/x") and guarded("PATCH", "/api/x") and guarded("POST", "/unload")
    assert not guarded("GET", "/api/status") and not guarded("GET", "/unload")
    assert changes_state("GET", "/unload") and changes_state("POST", "/api/x")
    assert not changes_state("GET", "/api/status") and not changes_state("GET", "/running")
    assert not guarded("POST", "/v1/chat/completions") and not guarded("POST", "/upstream/a/x")
    assert not guarded("POST", "/comfyui/prompt")
    assert same_origin("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert same_origin("http://LOCALHOST:8080", "localhost:8080")
    assert same_origin("https://swapd.lan", "swapd.lan:443")  # one side without a port
    assert same_origin("http://[::1]:9", "[::1]:9")
    assert not same_origin("http://127.0.0.1:8081", "127.0.0.1:8080")
    assert not same_origin("http://evil.example:8080", "127.0.0.1:8080")
    assert not same_origin("null", "127.0.0.1:8080")
    assert not same_origin("http://[::1", "127.0.0.1:8080")
    assert not same_origin("http://127.0.0.1:8080", "")


def test_cross_site_state_changes_are_refused(stack: Stack) -> None:
    assert _chat(stack, "a")[0] == 200
    own = stack.url  # http://127.0.0.1:<port>, what a page served by swapd sends
    refused = (
        ("POST", "/api/models/unload/a", None),
        ("POST", "/api/models/unload", None),
        ("POST", "/api/inflight/1/cancel", None),
        ("PUT", "/api/profiles/active", {"name": "quiet"}),
    )
    for origin in (EVIL, "null", "http://127.0.0.1:1"):
        for method, path, body in refused:
            status, answer = _raw(stack, method, path, origin, body)
            assert status == 403, (origin, path)
            error = answer["error"]
            assert error["code"] == "cross_origin" and error["type"] == "authentication_error"
            assert "cross-origin request refused" in error["message"]
    # Nothing changed.
    assert stack.model("a")["state"] == "ready"
    assert _raw(stack, "GET", "/api/profiles", EVIL)[1]["active"] is None
    # This host's Origin, and no Origin at all, are served.
    status, answer = _raw(stack, "PUT", "/api/profiles/active", own, {"name": "quiet"})
    assert (status, answer) == (200, {"active": "quiet"})
    status, answer = _raw(stack, "PUT", "/api/profiles/active", None, {"name": None})
    assert (status, answer) == (200, {"active": None})
    assert _raw(stack, "POST", "/api/models/unload/a", own)[0] == 200
    assert stack.model("a")["state"] == "stopped"
    assert _chat(stack, "a")[0] == 200
    assert _raw(stack, "POST", "/api/models/unload", None)[0] == 200
    assert stack.model("a")["state"] == "stopped"


def test_model_routes_and_upstream_are_forwarded_with_their_origin(stack: Stack) -> None:
    status, answer = _chat(stack, "a", EVIL)
    assert status == 200
    assert answer["request_headers"]["Origin"] == EVIL  # reached the upstream untouched
    status, answer = _raw(stack, "POST", "/upstream/a/anything", EVIL, {"x": 1})
    assert status == 200 and answer["headers"]["Origin"] == EVIL
    status, answer = _raw(stack, "GET", "/api/status", EVIL)  # a read: not checked
    assert status == 200 and answer["models"]


def test_cross_site_by_sec_fetch_site_get_unload_included(stack: Stack) -> None:
    """A cross-site image or link to llama-swap's `GET /unload` carries no Origin, but a browser
    marks it `Sec-Fetch-Site: cross-site` (or `same-site`, another port of the same host)."""
    assert _chat(stack, "a")[0] == 200
    for site in ("cross-site", "same-site"):
        status, answer = _raw(stack, "GET", "/unload", None, site=site)
        assert status == 403 and answer["error"]["code"] == "cross_origin"
        assert "Sec-Fetch-Site" in answer["error"]["message"]
        status, _ = _raw(stack, "POST", "/api/models/unload", stack.url, site=site)
        assert status == 403  # this host's Origin, but the browser says another site sent it
    assert stack.model("a")["state"] == "ready"  # nothing changed
    # A read is never checked; the page's own requests and typed-in URLs are served.
    assert _raw(stack, "GET", "/api/status", None, site="cross-site")[0] == 200
    assert _raw(stack, "GET", "/unload", None, site="same-origin")[0] == 200
    assert stack.model("a")["state"] == "stopped"
    assert _chat(stack, "a")[0] == 200
    assert _raw(stack, "GET", "/unload", None, site="none")[0] == 200
    assert stack.model("a")["state"] == "stopped"
