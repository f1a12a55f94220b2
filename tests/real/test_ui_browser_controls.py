"""The web UI's controls and viewers in Debian's real chromium (Playwright, as
tests/real/test_ui_browser.py) against the real stack: the profile switch (from the page, and from
another client, which the page shows without a reload), the capture viewer on a real request, the
combined log in the order lines were written, and the buttons passing the cross-site check
(proxy/origin_check.py) that refuses the same requests from another origin."""

from __future__ import annotations

import http.server
import json
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.combined_log import served, started
from tests.support.daemon import chat
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for
from tests.support.ui import DESKTOP, PHONE, call, module_shots, shoot, tab, ui_page

pytestmark = [pytest.mark.processes, pytest.mark.browser]

CHAT = "/v1/chat/completions"
PROFILES = {
    "quiet": {"description": "b is off", "pins": {"b": ""}},
    "redirect": {"pins": {"b": "a"}},
}


@pytest.fixture(scope="module")
def stack(chromium: Path) -> Iterator[Stack]:  # no browser, no stack: skipped before it starts
    a, b = model_ports(2)
    config = {
        "healthCheckTimeout": 15,
        "captureBuffer": 5,
        # Health answers a second after the start line (--health-delay): the combined log's
        # order is then observable (test_logs_combined.py).
        "models": {
            "a": local_model("a", a, "--health-delay", "1", ttl=600),
            "b": local_model("b", b, "--health-delay", "1", ttl=600),
        },
        "profiles": PROFILES,
    }
    with Stack(config) as running:
        yield running


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Path:
    return module_shots(request)


def _newest(stack: Stack) -> dict[str, Any] | None:
    data = json.loads(call(stack.url + "/api/metrics/activity?limit=1")[2])["data"]
    return data[0] if data else None


def _active(stack: Stack) -> str | None:
    active: str | None = json.loads(call(stack.url + "/api/profiles")[2])["active"]
    return active


def _set_active(stack: Stack, name: str | None) -> None:
    status, _, body = call(stack.url + "/api/profiles/active", "PUT", {"name": name})
    assert status == 200, body


def test_the_profile_switch_from_the_page_and_from_another_client(
    chromium: Path, stack: Stack, shots: Path
) -> None:
    _set_active(stack, None)
    with ui_page(chromium, stack.url + "/ui/") as page:
        page.wait_for_selector("#conn.live")
        page.wait_for_selector("#profile-box:not([hidden])")
        options = page.eval_on_selector_all("#profile option", "os => os.map(o => o.value)")
        assert options == ["", "quiet", "redirect"]
        assert page.input_value("#profile") == ""
        assert page.locator("article[data-model] [data-pin]").count() == 0
        page.evaluate("window.notReloaded = true")

        # From the page: the daemon's profile changes, the card of `b` says it is off.
        page.select_option("#profile", "quiet")
        wait_for(lambda: _active(stack) == "quiet", 10, what="the daemon's active profile")
        page.wait_for_selector('article[data-model="b"] [data-pin="off"]')
        assert page.text_content("#profile-pins") == "b off"
        assert page.is_disabled('article[data-model="b"] button[data-action="load"]')
        assert page.locator('article[data-model="a"] [data-pin]').count() == 0
        shoot(page, shots, "desktop-models-profile")

        # From another client: the page follows the `profileChanged` event, without a reload.
        _set_active(stack, "redirect")
        # Predicates as functions: Playwright evals a plain expression again at every poll, which
        # the page's CSP (no 'unsafe-eval') refuses, so a wait that had to poll failed; a function
        # is evaluated once and then called.
        page.wait_for_function("() => document.getElementById('profile').value === 'redirect'")
        page.wait_for_selector('article[data-model="b"] [data-pin="a"]')
        assert page.text_content("#profile-pins") == "b → a"
        _set_active(stack, None)
        page.wait_for_function("() => document.getElementById('profile').value === ''")
        wait_for(
            lambda: page.locator("article[data-model] [data-pin]").count() == 0,
            10,
            what="the pins gone",
        )
        assert page.text_content("#profile-pins") == ""
        assert page.evaluate("window.notReloaded") is True
        assert page.errors == []


def test_the_capture_viewer_shows_both_bodies_decoded(
    chromium: Path, stack: Stack, shots: Path
) -> None:
    with ui_page(chromium, stack.url + "/ui/#activity") as page:
        page.wait_for_selector("#conn.live")
        before = _newest(stack)
        answer = chat(stack.url, "a", "please capture me")
        wait_for(lambda: _newest(stack) != before, 10, what="the request's activity record")
        record = _newest(stack)
        assert record is not None
        assert record["has_capture"] is True
        button = page.wait_for_selector(
            f'#activity-table tr[data-activity="{record["id"]}"] button[data-action="capture"]'
        )
        button.click()
        page.wait_for_selector("#capture[open]")
        page.wait_for_selector('#capture [data-part="response"] pre.body')
        title = page.text_content("#capture-title") or ""
        assert title.startswith(f"POST {CHAT} → 200 · a")
        request_part = page.text_content('#capture [data-part="request"] pre.body') or ""
        response_part = page.text_content('#capture [data-part="response"] pre.body') or ""
        response_headers = page.text_content('#capture [data-part="response"] pre.headers') or ""
        # The request as the client sent it, and the answer as it was relayed: decoded from the
        # capture's base64 and pretty-printed JSON.
        assert '"content": "please capture me"' in request_part
        assert f'"content": "{answer["choices"][0]["message"]["content"]}"' in response_part
        assert "Content-Type: application/json" in response_headers
        shoot(page, shots, "desktop-capture")
        page.set_viewport_size(PHONE)
        shoot(page, shots, "phone-capture")
        assert page.evaluate("document.getElementById('capture').scrollWidth") <= PHONE["width"]
        page.click("#capture button.close")
        page.wait_for_selector("#capture:not([open])", state="attached")
        assert page.errors == []


def test_the_request_log_reads_new_records_a_batch_at_a_time(chromium: Path, stack: Stack) -> None:
    """An `activity` event is llama-swap's `{id}`: the page reads the new records from the
    activity API (`min_id`), at most every 250 ms however many events come, and shows each."""
    prior = _newest(stack)
    chat(stack.url, "a", "one before")
    wait_for(lambda: _newest(stack) != prior, 10, what="a record before the page opens")
    before = _newest(stack)
    assert before is not None
    with ui_page(chromium, stack.url + "/ui/#activity") as page:
        # The first read.
        page.wait_for_selector(f'#activity-table tr[data-activity="{before["id"]}"]')
        reads: list[str] = []
        page.on("request", lambda r: "/api/metrics/activity" in r.url and reads.append(r.url))
        first, last = before["id"] + 1, before["id"] + 20
        for _ in range(20):
            chat(stack.url, "a", "one of many")
        stored = lambda: (_newest(stack) or {"id": 0})["id"] == last  # noqa: E731
        wait_for(stored, 10, what="the 20 records stored")
        shown = lambda: page.locator(f'#activity-table tr[data-activity="{last}"]').count()  # noqa: E731
        wait_for(lambda: shown() == 1, 15, what="the newest record's row")
        for n in range(first, last + 1):
            assert page.locator(f'#activity-table tr[data-activity="{n}"]').count() == 1, n
        # 20 events, fewer reads, each of the records after those shown.
        assert 1 <= len(reads) < 20, reads
        assert f"min_id={first}" in reads[0], reads
        assert all("min_id=" in url for url in reads), reads
        assert page.errors == []


def test_the_request_log_is_read_again_when_the_daemon_numbers_from_one_again(
    chromium: Path, stack_factory: Callable[..., Stack]
) -> None:
    """Without `store.path` a restarted daemon numbers its records from 1 again: the page, whose
    event stream (to the proxy) stayed open, sees an id go back and reads the log from scratch."""
    (port,) = model_ports(1)
    alone = stack_factory({"healthCheckTimeout": 15, "models": {"a": local_model("a", port)}})
    with ui_page(chromium, alone.url + "/ui/#activity") as page:
        page.wait_for_selector("#conn.live")
        for _ in range(3):
            chat(alone.url, "a")
        rows = lambda: page.locator("#activity-table tr[data-activity]").count()  # noqa: E731
        wait_for(lambda: rows() == 3, 15, what="three rows")
        alone.kill_watcher("swapd-daemon", signal.SIGKILL, timeout=15)
        # The proxy's next heartbeat tells the new daemon it has an events client.
        wait_for(lambda: alone.status()["watching"], 10, what="the new daemon told of the page")
        chat(alone.url, "a", "after the restart")
        wait_for(lambda: rows() == 1, 15, what="the log read again: one record")
        assert page.locator('#activity-table tr[data-activity="1"]').count() == 1
        assert page.errors == []


def _logs(stack: Stack) -> str:
    return call(stack.url + "/logs")[2].decode()


def _request_then_logged(stack: Stack, model: str) -> None:
    count = _logs(stack).count(served(model))
    chat(stack.url, model)
    wait_for(lambda: _logs(stack).count(served(model)) > count, 10, what=f"{model}'s access line")


def _page_lines(page: Any) -> list[str]:
    lines: list[str] = page.eval_on_selector_all("#log .line", "els => els.map(e => e.textContent)")
    return lines


def _indexes(lines: list[str], *needles: str) -> list[int]:
    """The index of the last line holding each needle, in the order given."""
    return [max(i for i, line in enumerate(lines) if needle in line) for needle in needles]


def test_the_combined_log_in_the_order_lines_were_written(
    chromium: Path, stack: Stack, shots: Path
) -> None:
    stack.swapd("unload")
    _request_then_logged(stack, "a")
    _request_then_logged(stack, "b")  # swaps a out
    with ui_page(chromium, stack.url + "/ui/#logs") as page:
        assert page.input_value("#log-source") == ""  # combined
        page.wait_for_selector(f"#log .line:has-text('{served('b')}')")
        # The history: a's start, its request, b's start, its request (not grouped by source).
        wanted = (started("a"), served("a"), started("b"), served("b"))
        history = _indexes(_page_lines(page), *wanted)
        assert history == sorted(history)
        # Each model line is marked with its source; the proxy's lines are not.
        page.wait_for_selector('#log .line[data-source="a"] .src:has-text("[a] ")')
        assert page.locator("#log .line[data-source]", has_text=served("b")).count() == 0
        before = len(_page_lines(page))
        # Then new lines, live, in their order too.
        chat(stack.url, "a")  # swaps back
        wait_for(
            lambda: any(served("a") in line for line in _page_lines(page)[before:]),
            15,
            what="a's new access line on the page",
        )
        live = _page_lines(page)[before:]
        assert _indexes(live, started("a"), served("a")) == sorted(
            _indexes(live, started("a"), served("a"))
        )
        shoot(page, shots, "desktop-logs-combined")
        assert page.errors == []


class _Elsewhere(http.server.BaseHTTPRequestHandler):
    """Another site (another origin on loopback): one page, nothing else."""

    def do_GET(self) -> None:
        body = b"<!doctype html><title>elsewhere</title><p>another site</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def elsewhere() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Elsewhere)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_the_buttons_pass_the_cross_site_check(
    chromium: Path, stack: Stack, elsewhere: str
) -> None:
    """Unload and the profile switch carry the page's Origin: from swapd's own page they pass;
    the same request from another site's page is refused (test_proxy_origin.py has the raw
    HTTP cases)."""
    chat(stack.url, "a")
    with ui_page(chromium, stack.url + "/ui/") as page:
        page.wait_for_selector('article[data-model="a"][data-state="ready"]')
        page.click('article[data-model="a"] button[data-action="unload"]')
        page.wait_for_selector('article[data-model="a"][data-state="stopped"]')
        assert stack.model("a")["state"] == "stopped"
        chat(stack.url, "a")
        page.wait_for_selector('article[data-model="a"][data-state="ready"]')
        page.click("#unload-all")
        page.wait_for_selector('article[data-model="a"][data-state="stopped"]')
        assert page.errors == []
    chat(stack.url, "a")
    with ui_page(chromium, elsewhere) as other:
        # A simple POST (no preflight), as a hostile page would send it; the browser adds its
        # Origin (whether the page may read swapd's 403 depends on its CORS headers).
        outcome = other.evaluate(
            """async (url) => {
                try {
                    const r = await fetch(url + '/api/models/unload', {method: 'POST', body: 'x'});
                    return r.status;
                } catch (err) { return 'blocked'; }
            }""",
            stack.url,
        )
        assert outcome in ("blocked", 403)
    assert stack.model("a")["state"] == "ready"  # not unloaded


def test_the_profile_control_at_phone_width(chromium: Path, stack: Stack, shots: Path) -> None:
    _set_active(stack, "quiet")
    try:
        for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
            with ui_page(chromium, stack.url + "/ui/", viewport=viewport) as page:
                page.wait_for_selector('article[data-model="b"] [data-pin="off"]')
                tab(page, "models")
                shoot(page, shots, f"{label}-models-profile")
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= viewport["width"]
                assert page.errors == []
    finally:
        _set_active(stack, None)
