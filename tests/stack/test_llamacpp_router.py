"""llama.cpp's router API (what clients of `llama-server` started without a model call) against
the real stack, with plain HTTP as curl sends it: `GET /models` and `/v1/models` with llama.cpp's
`status.value` words, `POST /models/load` and `/models/unload` with `{"model": ...}`, and
`/props` with and without `?model=`. The models are tests/support/upstreams/fake_model.py (it
stands for llama-server; its catch-all route says which path and query reached it)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    alpha, beta = model_ports(2)
    # One group that does not swap: both models may run at once (for `/props` with two).
    config = {
        "healthCheckTimeout": 15,
        "groups": {"both": {"swap": False, "members": ["alpha", "beta"]}},
        "models": {
            "alpha": local_model("alpha", alpha, aliases=["al"]),
            "beta": local_model("beta", beta, "--health-delay", "2"),
        },
    }
    with Stack(config) as stack:
        yield stack


def call(stack: Stack, method: str, path: str, body: object = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        stack.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def status_values(stack: Stack, path: str = "/models") -> dict[str, str]:
    status, listed = call(stack, "GET", path)
    assert status == 200 and listed["object"] == "list"
    return {m["id"]: m["status"]["value"] for m in listed["data"]}


def test_load_answers_at_once_and_models_shows_the_way_to_loaded(stack: Stack) -> None:
    stack.swapd("unload")
    assert status_values(stack) == {"alpha": "unloaded", "beta": "unloaded"}
    assert status_values(stack, "/v1/models") == {"alpha": "unloaded", "beta": "unloaded"}
    # beta's health check waits 2 s: the answer comes before it is ready, and `/models` says
    # `loading` until it is.
    assert call(stack, "POST", "/models/load", {"model": "beta"}) == (200, {"success": True})
    wait_for(lambda: status_values(stack)["beta"] == "loading", 10, what="beta loading")
    wait_for(lambda: status_values(stack)["beta"] == "loaded", 15, what="beta loaded")
    assert stack.model("beta")["state"] == "ready"
    status, error = call(stack, "POST", "/models/load", {"model": "beta"})
    assert status == 400 and error["error"]["message"] == "model beta is already loaded"


def test_unload_waits_for_the_stop(stack: Stack) -> None:
    assert call(stack, "POST", "/models/load", {"model": "al"})[0] in (200, 400)
    stack.wait_state("alpha", "ready")
    assert call(stack, "POST", "/models/unload", {"model": "alpha"}) == (200, {"success": True})
    assert stack.model("alpha")["state"] == "stopped"
    status, error = call(stack, "POST", "/models/unload", {"model": "alpha"})
    assert status == 400 and error["error"]["message"] == "model alpha is not loaded"


def test_unknown_and_missing_models(stack: Stack) -> None:
    status, error = call(stack, "POST", "/models/load", {"model": "nope"})
    assert status == 404 and error["error"]["message"] == "model nope not found"
    status, error = call(stack, "POST", "/models/load", {})
    assert status == 400 and "model name is missing" in error["error"]["message"]
    status, error = call(stack, "POST", "/models/unload", {"model": "nope"})
    assert status == 404


def test_props_with_and_without_a_model(stack: Stack) -> None:
    stack.swapd("unload")
    status, props = call(stack, "GET", "/props")
    assert status == 200 and props["role"] == "router"  # llama.cpp's router, nothing loaded

    status, echoed = call(stack, "GET", "/props?model=al")  # starts alpha, as any request
    assert status == 200
    assert echoed["raw_path"] == "/props?model=al" and echoed["served_by"]["name"] == "alpha"

    status, echoed = call(stack, "GET", "/props")  # the one running model
    assert status == 200 and echoed["served_by"]["name"] == "alpha"
    assert echoed["raw_path"] == "/props"

    call(stack, "POST", "/models/load", {"model": "beta"})
    stack.wait_state("beta", "ready")
    assert stack.model("alpha")["state"] == "ready"
    status, error = call(stack, "GET", "/props")
    assert status == 400
    assert error["error"]["message"] == (
        "several models are running (alpha, beta): name one with ?model="
    )


def test_router_changes_are_refused_cross_site(stack: Stack) -> None:
    request = urllib.request.Request(
        stack.url + "/models/unload",
        data=b'{"model": "alpha"}',
        headers={"Content-Type": "application/json", "Origin": "http://evil.example"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
