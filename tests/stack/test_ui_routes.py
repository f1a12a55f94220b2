"""The web UI's routes over real HTTP against the real stack, no browser needed: the redirects,
the static files (content types, the CSP that keeps the page on this host, ETags, no path
outside the package), `/api/status` (the document `swapd status --json` prints) and
`/api/swaps` with the `swap` event on `/api/events`."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.daemon import chat
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for
from tests.support.ui import call

pytestmark = pytest.mark.processes


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    a, b = model_ports(2)
    return stack_factory(
        {"healthCheckTimeout": 15, "models": {"a": local_model("a", a), "b": local_model("b", b)}}
    )


def test_redirects_and_static_files(stack: Stack) -> None:
    status, headers, _ = call(stack.url + "/ui")
    assert (status, headers["Location"]) == (302, "/ui/")
    # `/` sends a browser to the page; Ollama's clients get "Ollama is running" there
    # (tests/stack/test_ollama_api.py).
    browser = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    status, headers, _ = call(stack.url + "/", headers=browser)
    assert (status, headers["Location"]) == (302, "/ui/")
    # llama-swap's `GET /upstream` goes to its UI's models page; a page path is the page.
    status, headers, _ = call(stack.url + "/upstream")
    assert (status, headers["Location"]) == (302, "/ui/models")
    status, headers, body = call(stack.url + "/ui/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'src="/ui/main.js"' in body
    assert call(stack.url + "/ui/models")[2] == body
    status, headers, icon = call(stack.url + "/favicon.ico")
    assert status == 200 and headers["Content-Type"] == "image/x-icon"
    assert icon[:4] == b"\x00\x00\x01\x00"  # an ICO file's header
    csp = headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "connect-src 'self'" in csp
    status, headers, body = call(stack.url + "/ui/main.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    etag = headers["ETag"]
    request = urllib.request.Request(stack.url + "/ui/main.js", headers={"If-None-Match": etag})
    try:
        urllib.request.urlopen(request, timeout=10)
        raise AssertionError("expected 304")
    except urllib.error.HTTPError as exc:
        assert exc.code == 304
    for path in ("/ui/nope.js", "/ui/assets.py", "/ui/..%2F__init__.py", "/ui/%2e%2e/app.py"):
        status, headers, body = call(stack.url + path)
        assert status == 404, path
        assert json.loads(body)["error"]["message"], path


def test_api_status_is_what_swapd_status_prints(stack: Stack) -> None:
    chat(stack.url, "a")
    status, _, body = call(stack.url + "/api/status")
    assert status == 200
    page = json.loads(body)
    cli = stack.status()
    assert [m["model"] for m in page["models"]] == [m["model"] for m in cli["models"]]
    assert set(page) == set(cli)
    (a,) = [m for m in page["models"] if m["model"] == "a"]
    assert a["state"] == "ready" and a["pid"] == stack.model("a")["pid"]


def test_swaps_api_and_the_swap_event(stack: Stack) -> None:
    chat(stack.url, "a")
    frames: list[dict[str, Any]] = []
    opened = threading.Event()

    def listen() -> None:
        with urllib.request.urlopen(stack.url + "/api/events", timeout=30) as response:
            opened.set()
            for line in response:
                if line.startswith(b"data:"):
                    frames.append(json.loads(line[5:]))
                    if frames[-1]["type"] == "swap" and '"kind":"swap"' in frames[-1]["data"]:
                        return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert opened.wait(10)
    wait_for(lambda: any(f["type"] == "modelStatus" for f in frames), 10, what="the snapshot")
    chat(stack.url, "b")  # swaps a out
    listener.join(20)
    swaps = [json.loads(f["data"]) for f in frames if f["type"] == "swap"]
    assert [(s["kind"], s["model"]) for s in swaps] == [("stop", "a"), ("swap", "b")]
    stop, swap = swaps
    assert (stop["cause"], stop["for_model"]) == ("swap", "b")
    assert set(stop["phases"]) == {"drain", "stop"}
    assert swap["evicted"] == ["a"] and set(swap["phases"]) == {"drain", "stop", "start", "health"}
    listed = json.loads(call(stack.url + "/api/swaps")[2])["swaps"]
    assert [(s["kind"], s["model"]) for s in listed] == [
        ("start", "a"), ("stop", "a"), ("swap", "b"),
    ]  # fmt: skip
    assert listed[1:] == swaps
    stack.swapd("unload", "b")
    last = wait_for(
        lambda: (
            (s := json.loads(call(stack.url + "/api/swaps")[2])["swaps"])[-1]["model"] == "b"
            and s[-1]["kind"] == "stop"
            and s[-1]
        ),
        10,
        what="the unload's record",
    )
    assert last["cause"] == "unload"
