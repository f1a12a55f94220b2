"""Another site's requests refused (proxy/origin_check.py, issue 29 item 5), over raw HTTP against
the real stack: a request whose `Origin` names another host:port than its `Host`, or that a
browser marks as another site's (`Sec-Fetch-Site`), gets a 403 in the OpenAI error shape and
changes nothing, on swapd's own routes, model routes, `/upstream/` and reads alike, and so does
one whose `Host` is a name another site could point here (DNS rebinding); the same request with
this host's Origin, or with none (curl, SDKs), is served, its Origin forwarded untouched; an
origin in `security.cors.allowedOrigins` is served with CORS headers (swapd's, the upstream's
replaced), and its preflight answered."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack

pytestmark = pytest.mark.processes

EVIL = "http://evil.example:8080"
JSON = "application/json"


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
    host: str | None = None,
) -> tuple[int, dict[str, Any]]:
    address, port = stack.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(address, int(port), timeout=30)
    headers = {"Content-Type": "application/json"}
    if host is not None:
        headers["Host"] = host
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
    assert _raw(stack, "GET", "/api/profiles", None)[1]["active"] is None
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


def test_model_routes_upstream_and_reads_are_refused_to_another_site(stack: Stack) -> None:
    assert _chat(stack, "b")[0] == 200
    for method, path, body in (
        ("POST", "/v1/chat/completions", {"model": "a", "messages": []}),
        ("POST", "/upstream/a/anything", {"x": 1}),
        ("GET", "/upstream/a/", None),
        ("GET", "/v1/models", None),
        ("GET", "/api/status", None),
        ("POST", "/api/chat", {"model": "a", "messages": []}),  # Ollama's
    ):
        status, answer = _raw(stack, method, path, EVIL, body)
        assert status == 403 and answer["error"]["code"] == "cross_origin", (path, answer)
    assert stack.model("a")["state"] == "stopped"  # nothing started or swapped
    # The page's own Origin reaches the upstream untouched.
    status, answer = _chat(stack, "a", stack.url)
    assert status == 200
    assert answer["request_headers"]["Origin"] == stack.url
    status, answer = _raw(stack, "POST", "/upstream/a/anything", stack.url, {"x": 1})
    assert status == 200 and answer["headers"]["Origin"] == stack.url


def _navigate(stack: Stack, path: str, site: str) -> tuple[int, bytes]:
    """A top-level navigation the user made on another site's page, with the headers a browser
    sends: a click on a link, a GET form's submit button, a `window.open` on a click."""
    address, port = stack.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(address, int(port), timeout=30)
    headers = {
        "Accept": "text/html,application/xhtml+xml,*/*;q=0.8",
        "Sec-Fetch-Site": site,
        "Sec-Fetch-Mode": "navigate",
        "Sec-Fetch-Dest": "document",
        "Sec-Fetch-User": "?1",
        "Upgrade-Insecure-Requests": "1",
        "Referer": EVIL + "/page",
    }
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_another_sites_links_and_forms_start_nothing(stack: Stack) -> None:
    """Issue 40 item 9: a click on another site's link or button swapped models (links to
    `/upstream/<m>/` and `/props?model=`, a GET form, a `window.open`)."""
    for site in ("cross-site", "same-site"):
        for path in ("/upstream/a/", "/props?model=a", "/v1/audio/voices?model=a", "/unload"):
            status, body = _navigate(stack, path, site)
            # A navigation asks for a page (`Accept: text/html`), and the refusal comes as one,
            # as llama-swap's errors do (issue 41).
            assert status == 403 and b"navigation refused" in body, (path, body)
        assert stack.model("a")["state"] == "stopped"  # nothing started
        # The UI and pages that start nothing open as before.
        for path in ("/ui/", "/running", "/v1/models"):
            assert _navigate(stack, path, site)[0] == 200, path
    assert stack.model("a")["state"] == "stopped"


def test_a_dns_rebinding_host_is_refused(stack: Stack) -> None:
    """A page at `http://rebind.example:<port>` whose name points here is same-origin as the
    browser sees it: its `Host` is what gives it away."""
    assert _chat(stack, "a")[0] == 200
    rebind = f"rebind.example:{stack.port}"
    for method, path in (("POST", "/api/models/unload"), ("GET", "/v1/models")):
        status, answer = _raw(stack, method, path, f"http://{rebind}", host=rebind)
        assert status == 403 and "DNS" in answer["error"]["message"], answer
    assert stack.model("a")["state"] == "ready"
    # curl with that Host is no browser: served.
    assert _raw(stack, "GET", "/v1/models", None, host=rebind)[0] == 200


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
    # A read of another site's is refused too; the page's own requests and typed-in URLs are
    # served.
    assert _raw(stack, "GET", "/api/status", None, site="cross-site")[0] == 403
    assert _raw(stack, "GET", "/unload", None, site="same-origin")[0] == 200
    assert stack.model("a")["state"] == "stopped"
    assert _chat(stack, "a")[0] == 200
    assert _raw(stack, "GET", "/unload", None, site="none")[0] == 200
    assert stack.model("a")["state"] == "stopped"


def test_an_allowed_origin_is_served_with_cors_headers(stack_factory: Callable[..., Stack]) -> None:
    (a,) = model_ports(1)
    stack = stack_factory(
        {
            "models": {"a": local_model("a", a)},
            "security": {"cors": {"allowedOrigins": [EVIL], "exposedHeaders": ["X-Req"]}},
        }
    )
    host, port = stack.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            "OPTIONS",
            "/v1/chat/completions",
            headers={"Origin": EVIL, "Access-Control-Request-Headers": "content-type"},
        )
        preflight = conn.getresponse()
        preflight.read()
        assert preflight.status == 204
        assert preflight.getheader("Access-Control-Allow-Origin") == EVIL
        assert preflight.getheader("Access-Control-Allow-Headers") == "content-type"
        body = json.dumps({"model": "a", "messages": []})
        headers = {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Content-Type": JSON}
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 200
        # One Access-Control-Allow-Origin, swapd's (the upstream sends its own `*`).
        assert answer.headers.get_all("Access-Control-Allow-Origin") == [EVIL]
        assert answer.getheader("Vary") == "Origin"
        assert answer.getheader("Access-Control-Expose-Headers") == "X-Req"
        conn.request("GET", "/v1/models", headers={"Origin": EVIL})
        listing = conn.getresponse()
        assert listing.status == 200 and json.loads(listing.read())["data"]
        assert listing.getheader("Access-Control-Allow-Origin") == EVIL
        conn.request("GET", "/v1/models", headers={"Origin": "http://127.0.0.1:1"})
        other = conn.getresponse()
        other.read()
        assert other.status == 403 and other.getheader("Access-Control-Allow-Origin") is None
    finally:
        conn.close()
