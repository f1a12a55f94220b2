"""A web page cannot drive a local swapd (issue 29, item 5), probed in a real browser: Debian's
chromium driven by Playwright (tests/support/realparts/browser.py), a page served on another
loopback port, and the real stack (circusd, daemon, proxy, fake model processes; the ComfyUI-like
upstream stands for the seed's ComfyUI container). The page tries what a hostile page would: a
no-cors `POST /v1/chat/completions?model=...` with a `text/plain` body, `<img src=/upstream/m/>`,
`new WebSocket(ws://.../comfyui/ws)`, a cross-origin `fetch('/v1/models')`, a link the user
clicks to `/upstream/m/` or `/props?model=m` (issue 40, item 9; a link to the UI opens), and a
DNS-rebinding page (a name that resolves to 127.0.0.1: `Host` and `Origin` both
`rebind.example:PORT`). Each is refused by default (nothing starts, swaps, unloads or is read),
then allowed once the page's origin (and the rebinding name) are in
`security.cors.allowedOrigins`, by a reload."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.comfyui import ComfyUpstream, comfyui_model_yaml, free_port_run
from tests.support.proxy import model_ports
from tests.support.stack import Stack, fake_model_cmd, free_port, wait_for
from tests.support.ui import ui_page

pytestmark = [pytest.mark.processes, pytest.mark.browser, pytest.mark.timeout(300)]

COMFY = "comfyui_auto"
PAGE = b"<!DOCTYPE html><title>another site</title><p>another site"


def _config(stack: Stack, comfy: ComfyUpstream, a: int, b: int, allowed: list[str]) -> str:
    security = f"security:\n  cors:\n    allowedOrigins: {json.dumps(allowed)}\n" if allowed else ""
    return f"""
healthCheckTimeout: 15
startPort: {free_port_run(1)}
{security}models:
  demo-a:
    cmd: {fake_model_cmd("demo-a", port=str(a))}
    proxy: http://127.0.0.1:{a}
  demo-b:
    cmd: {fake_model_cmd("demo-b", port=str(b))}
    proxy: http://127.0.0.1:{b}
{comfyui_model_yaml(comfy)}"""


@contextlib.contextmanager
def _another_site() -> Iterator[str]:
    """A plain page on another loopback port: another site's, to the browser."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with _another_site() as url:
        yield url


@pytest.fixture(scope="module")
def stack(chromium: Path, site: str) -> Iterator[Stack]:
    a, b = model_ports(2)
    running = Stack("", port=free_port())
    comfy = ComfyUpstream(running.base, COMFY)
    running.comfy = comfy  # type: ignore[attr-defined]
    running.write_config(_config(running, comfy, a, b, []))
    running.ports = (a, b)  # type: ignore[attr-defined]
    with running:
        yield running


def _state(stack: Stack, model: str) -> str:
    return str(stack.model(model)["state"])


def _ready(stack: Stack, model: str) -> None:
    """`model` loaded by the test itself (curl-like: no Origin)."""
    stack.get_json(f"/upstream/{model}/health")
    stack.wait_state(model, "ready", 30)


def _probes(page: Any, swapd: str) -> dict[str, Any]:
    """What the other site's page gets from each probe (the fetch's outcome as far as a page can
    see it); the effects are read from swapd by the test."""
    return dict(
        page.evaluate(
            """async (swapd) => {
              const out = {};
              await fetch(swapd + '/v1/chat/completions?model=demo-b', {
                method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'},
                body: '{"messages": []}'}).then(() => out.post = 'sent', e => out.post = String(e));
              out.models = await fetch(swapd + '/v1/models').then(
                r => r.json().then(j => j.data.map(m => m.id)), e => 'unreadable: ' + e);
              return out;
            }""",
            swapd,
        )
    )


def _image(page: Any, url: str) -> None:
    page.evaluate(
        """(url) => new Promise(done => {
             const img = new Image(); img.onload = img.onerror = () => done(); img.src = url; })""",
        url,
    )


def _click(page: Any, site: str, url: str) -> int:
    """The user clicks a link to `url` on the other site's page (a top-level navigation with
    user activation: `Sec-Fetch-User: ?1`); the status of the page it opens."""
    page.goto(site + "/")
    page.evaluate(
        """(url) => { const a = document.createElement('a'); a.id = 'go'; a.href = url;
                      a.textContent = 'go'; document.body.appendChild(a); }""",
        url,
    )
    with page.expect_navigation() as navigation:
        page.click("#go")
    return int(navigation.value.status)


def _websocket(page: Any, url: str) -> str:
    return str(
        page.evaluate(
            """(url) => new Promise(done => {
                 const ws = new WebSocket(url);
                 ws.onopen = () => { ws.close(); done('open'); };
                 ws.onerror = () => done('error'); })""",
            url,
        )
    )


def _rebinding(page: Any, swapd_port: int) -> int:
    """From a page at http://rebind.example:PORT (the name resolves to 127.0.0.1): the page's own
    POST, as the browser sees it; its status (0: the browser gave none)."""
    page.goto(f"http://rebind.example:{swapd_port}/health")
    return int(
        page.evaluate(
            """() => fetch('/api/models/unload', {method: 'POST'}).then(r => r.status, () => 0)"""
        )
    )


def test_another_sites_page_cannot_drive_swapd_until_it_is_allowed(
    chromium: Path, stack: Stack, site: str
) -> None:
    comfy: ComfyUpstream = stack.comfy  # type: ignore[attr-defined]
    resolver = ("--host-resolver-rules=MAP rebind.example 127.0.0.1",)
    ws_url = stack.url.replace("http://", "ws://") + "/comfyui/ws"

    # --- by default: refused, nothing happens ---------------------------------------------
    _ready(stack, "demo-a")
    with ui_page(chromium, site + "/", args=resolver) as page:
        seen = _probes(page, stack.url)
        assert seen["post"] == "sent"  # a no-cors request always "succeeds" to the page
        assert str(seen["models"]).startswith("unreadable"), seen
        assert _state(stack, "demo-b") == "stopped" and _state(stack, "demo-a") == "ready"
        _image(page, stack.url + "/upstream/demo-b/")
        assert _state(stack, "demo-b") == "stopped" and _state(stack, "demo-a") == "ready"
        _ready(stack, COMFY)  # ComfyUI up (demo-a swapped out), its websocket would be served
        mark = comfy.mark()
        assert _websocket(page, ws_url) == "error"
        assert [e for e in comfy.since(mark) if e.get("path") == "/ws"] == []  # never reached it
        assert _rebinding(page, stack.port) == 403
        assert _state(stack, COMFY) == "ready"  # not unloaded
        # Links the user clicks (issue 40, item 9): to the UI, yes; to what starts a model, no.
        assert _click(page, site, stack.url + "/ui/") == 200
        for target in ("/upstream/demo-b/", "/props?model=demo-b"):
            assert _click(page, site, stack.url + target) == 403
        assert _state(stack, "demo-b") == "stopped" and _state(stack, COMFY) == "ready"

    # --- allowed: the page's origin and the rebinding name in security.cors ------------------
    a, b = stack.ports  # type: ignore[attr-defined]
    allowed = [site, f"http://rebind.example:{stack.port}"]
    stack.write_config(_config(stack, comfy, a, b, allowed))
    stack.swapd("reload")
    _ready(stack, "demo-a")
    with ui_page(chromium, site + "/", args=resolver) as page:
        seen = _probes(page, stack.url)
        assert seen["models"] == sorted(seen["models"]) and "demo-b" in seen["models"], seen
        wait_for(lambda: _state(stack, "demo-b") == "ready", 30, what="demo-b started")
        stack.swapd("unload", "demo-b")
        _image(page, stack.url + "/upstream/demo-b/")
        wait_for(lambda: _state(stack, "demo-b") == "ready", 30, what="demo-b started by the img")
        _ready(stack, COMFY)
        mark = comfy.mark()
        _websocket(page, ws_url)  # ComfyUI itself refuses another site (its own rule)...
        reached = functools.partial(
            lambda: [e for e in comfy.since(mark) if e.get("path") == "/ws"]
        )
        wait_for(reached, 15, what="the websocket reached ComfyUI")  # ... once swapd lets it by
        assert _rebinding(page, stack.port) == 200
        wait_for(lambda: _state(stack, COMFY) == "stopped", 30, what="unloaded")
