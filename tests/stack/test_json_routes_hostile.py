"""Hostile JSON bodies on the routes that read one themselves (issue 40, item 2): Ollama's
(`/api/chat`, `/api/generate`, `/api/embed`, `/api/embeddings`, `/api/show`), llama.cpp's
router's (`/models/load`, `/models/unload`), the profile API (`PUT /api/profiles/active`), and the
load, sleep and unload APIs (the model in the path, a body they ignore). Each answers a body nested
too deeply for the decoder with the model routes' 400, and a fuzz of every field each route reads
gets no 5xx from swapd."""

from __future__ import annotations

import base64
import http.client
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import route_bodies
from tests.support.hostile import peak_rss, proxy_process, reset_peak_rss
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack

pytestmark = pytest.mark.processes

NAMES = ("m", "fast", "nope")
JSON_ROUTES = [
    ("POST", "/api/chat"),
    ("POST", "/api/generate"),
    ("POST", "/api/embed"),
    ("POST", "/api/embeddings"),
    ("POST", "/api/show"),
    ("POST", "/models/load"),
    ("POST", "/models/unload"),
    ("PUT", "/api/profiles/active"),
]
MiB = 1024 * 1024
PATH_ROUTES = ["/api/models/load/", "/api/models/sleep/", "/models/sleep/", "/api/models/unload/"]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    stack = Stack("")
    (port,) = model_ports(1)
    stack.write_config(
        {
            "healthCheckTimeout": 15,
            "models": {"m": local_model("m", port)},
            "profiles": {"fast": {"pins": {"chat": "m"}}},
        }
    )
    with stack:
        yield stack


def send(stack: Stack, method: str, path: str, body: bytes) -> tuple[int, bytes]:
    url = urllib.parse.urlsplit(stack.url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        conn.request(method, path, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES, ids=[p for _, p in JSON_ROUTES])
def test_json_nested_1001_deep_is_the_model_routes_400(
    stack: Stack, method: str, path: str
) -> None:
    """A 2 KB body nested 1,001 deep answered 500 with a traceback on each of these routes."""
    body = route_bodies.nested(1001)
    assert len(body) < 2100
    status, answer = send(stack, method, path, body)
    assert status == 400, answer
    assert "malformed JSON body: nested too deeply" in answer.decode(), answer


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES, ids=[p for _, p in JSON_ROUTES])
@pytest.mark.parametrize(
    "body", [b"{", b"[1]", b'"x"', b"\xff\xfe"], ids=["cut", "array", "text", "bytes"]
)
def test_a_body_that_is_no_json_object_is_a_400(
    stack: Stack, method: str, path: str, body: bytes
) -> None:
    status, answer = send(stack, method, path, body)
    assert status == 400, answer


def _routes_and_bodies() -> st.SearchStrategy[tuple[str, str, Any]]:
    ollama = route_bodies.ollama(NAMES)
    by_route = {
        "/models/load": route_bodies.router(NAMES),
        "/models/unload": route_bodies.router(NAMES),
        "/api/profiles/active": route_bodies.profile(NAMES),
    }
    json_routes = st.sampled_from(JSON_ROUTES).flatmap(
        lambda route: st.tuples(
            st.just(route[0]),
            st.just(route[1]),
            by_route[route[1]] if route[1] in by_route else ollama,
        )
    )
    path_routes = st.tuples(
        st.just("POST"),
        st.builds(
            lambda prefix, name: prefix + urllib.parse.quote(name, safe=""),
            st.sampled_from(PATH_ROUTES),
            route_bodies.models(NAMES),
        ),
        route_bodies.ANY,
    )
    return st.one_of(json_routes, json_routes, json_routes, path_routes)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(_routes_and_bodies())
def test_fuzzed_bodies_on_every_route_get_no_5xx(stack: Stack, case: tuple[str, str, Any]) -> None:
    """Every field each route reads, of the right type or any other (bounded: 150 requests):
    swapd answers each, never with a 5xx of its own."""
    method, path, doc = case
    status, answer = send(stack, method, path, json.dumps(doc).encode())
    assert status < 500, (method, path, doc, status, answer[:500])


def test_an_ollama_image_request_costs_about_what_an_openai_one_does(stack: Stack) -> None:
    """An Ollama image request held its body, its decoded document, the `data:` URL and the
    encoded translation at once: 4x its size in proxy memory (issue 40, item 8). Now each is let
    go of as the next is made: about what the same image costs on the OpenAI route."""
    size = 32 * MiB
    image = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(size * 3 // 4 - 8)).decode()
    proxy = proxy_process(stack)
    grew = {}
    for route, body in (
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + image}}]}]}),
        ("/api/chat", {"model": "m", "stream": False, "messages": [
            {"role": "user", "content": "see", "images": [image]}]}),
    ):  # fmt: skip
        data = json.dumps(body).encode()
        # The least of three tries: what the request path must hold. One try's peak RSS counted
        # one body more now and then (2 of 4 single runs of this test failed so on e04754c,
        # where it was written; the regression it guards measured 3.96x).
        tries = []
        for _ in range(3):
            before = proxy.memory_info().rss
            reset_peak_rss(proxy)
            status, answer = send(stack, "POST", route, data)
            assert status == 200, answer[:300]
            tries.append((peak_rss(proxy) - before) / len(data))
        grew[route] = min(tries)
    # Measured: 3.96x before; after, 1.0x to 2.0x (the body read as it arrives, then joined, as
    # aiohttp's own read does for the OpenAI route: 2.0x).
    assert grew["/api/chat"] < 3.0, grew
    assert grew["/api/chat"] < grew["/v1/chat/completions"] + 0.5, grew
