"""The explicit load against the real stack: `POST /api/models/load/<id>` (waiting, and with
`?wait=false`), `swapd load`, and llama-swap's UI's way (`GET /upstream/<id>/`), for a model whose
upstream has no page at `/` (tests/support/upstreams/fake_model.py `--no-root`, standing for
llama-server or vLLM, which answer 404 there)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, http_get, wait_for

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    rootless, slow, broken = model_ports(3)
    config = {
        "healthCheckTimeout": 15,
        "models": {
            "rootless": local_model("rootless", rootless, "--no-root", aliases=["rl"]),
            "slow": local_model("slow", slow, "--no-root", "--health-delay", "1.5"),
            "broken": local_model("broken", broken, "--fail"),
        },
    }
    with Stack(config) as stack:
        yield stack


def post(stack: Stack, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(stack.url + path, data=b"", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_load_waits_until_the_model_is_ready(stack: Stack) -> None:
    stack.swapd("unload")
    assert post(stack, "/api/models/load/rl") == (
        200,
        {"msg": "ok", "model": "rootless", "state": "ready"},
    )
    assert stack.model("rootless")["state"] == "ready"
    # Its upstream has no page at `/`: what a GET there answers is the upstream's own 404.
    assert http_get(stack.url + "/upstream/rootless/")[0] == 404
    status, swaps = stack.get_json("/api/swaps")
    assert status == 200
    last = [r for r in swaps["swaps"] if r["model"] == "rootless"][-1]
    assert last["cause"] == "load" and last["result"] == "ok"


def test_load_without_waiting(stack: Stack) -> None:
    stack.swapd("unload")
    status, body = post(stack, "/api/models/load/slow?wait=false")
    assert status == 202
    assert body["msg"] == "loading" and body["model"] == "slow"
    stack.wait_state("slow", "ready")
    # The proxy answers from its copy of the states, which hears of `ready` a moment later.
    wait_for(
        lambda: any(
            (m["model"], m["swapd_state"]) == ("slow", "ready")
            for m in stack.get_json("/running")[1]["running"]
        ),
        what="the proxy's copy of slow's state",
    )
    assert post(stack, "/api/models/load/slow?wait=false") == (
        200,
        {"msg": "ok", "model": "slow", "state": "ready"},
    )
    status, error = post(stack, "/api/models/load/slow?wait=perhaps")
    assert status == 400 and "wait must be true or false" in error["error"]["message"]


def test_load_errors(stack: Stack) -> None:
    status, error = post(stack, "/api/models/load/nope")
    assert status == 404 and error["error"]["message"] == "model nope not found"
    status, error = post(stack, "/api/models/load/broken")
    assert status == 502 and error["error"]["code"] == "start_failed"
    assert any("cannot load its weights" in line for line in error["error"]["log_tail"])
    # A browser page elsewhere cannot load models with the credentials it holds.
    status, error = post(stack, "/api/models/load/rootless", {"Origin": "http://evil.example"})
    assert status == 403 and error["error"]["code"] == "cross_origin"


def test_swapd_load(stack: Stack) -> None:
    stack.swapd("unload")
    done = stack.swapd("load", "rootless")
    assert done.stdout.startswith("rootless is ready at http://127.0.0.1:")
    assert stack.model("rootless")["state"] == "ready"
    failed = stack.swapd("load", "broken", check=False)
    assert failed.returncode == 1
    assert "broken" in failed.stderr and "cannot load its weights" in failed.stderr
    unknown = stack.swapd("load", "nope", check=False)
    assert unknown.returncode == 1 and "nope" in unknown.stderr


def test_llama_swaps_ui_load_works_and_keeps_the_passthrough(stack: Stack) -> None:
    """llama-swap's UI loads with `GET /upstream/<id>/?_=<time>` and reads only `response.ok`
    (a failure is a console line): the model loads, and the upstream's own 404 is passed on as
    it is, as for any other request through `/upstream/`."""
    stack.swapd("unload")
    status, body = http_get(stack.url + "/upstream/rootless/?_=1733000000000")
    assert (status, json.loads(body)) == (404, {"detail": "Not Found"})
    wait_for(lambda: stack.model("rootless")["state"] == "ready", what="rootless ready")
