"""The web UI at `/ui/` in a real browser: Debian's chromium driven by Playwright
(tests/support/realparts/browser.py), against the real stack (circusd, daemon, proxy, fake model
processes on loopback). Each test reads what the page shows and checks it against the system's own
interfaces (`swapd status`, `/api/swaps`, `/api/metrics/activity`). Screenshots of every page, at
desktop and phone width, are saved where tests/support/ui.py's `shots_dir` says."""

from __future__ import annotations

import json
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import chat
from tests.support.proxy import local_model, model_ports
from tests.support.stack import FAKE_MODEL, Stack, wait_for
from tests.support.ui import DESKTOP, PHONE, call, module_shots, shoot, tab, ui_page

pytestmark = [pytest.mark.processes, pytest.mark.browser]

CHAT = "/v1/chat/completions"
COLOUR = "colour-line-red"


def _coloured(port: int) -> dict[str, Any]:
    """Model `b`: prints one ANSI-coloured line, then becomes the fake model (which answers
    health late, so its start is seen going on)."""
    code = (
        "import os, sys; print('\\x1b[31m" + COLOUR + "\\x1b[0m', flush=True); "
        f"os.execv(sys.executable, [sys.executable, {str(FAKE_MODEL)!r}, '--port', '{port}', "
        "'--name', 'b', '--health-delay', '1.5'])"
    )
    return {
        "cmd": f'{sys.executable} -c "{code}"',
        "proxy": f"http://127.0.0.1:{port}",
        "name": "Model B",
        "description": "prints in colour, starts slowly",
    }


@pytest.fixture(scope="module")
def stack(chromium: Path) -> Iterator[Stack]:  # no browser, no stack: skipped before it starts
    a, b = model_ports(2)
    config = {
        "healthCheckTimeout": 15,
        "models": {
            "a": {**local_model("a", a, ttl=600), "name": "Model A"},
            "b": _coloured(b),
        },
    }
    with Stack(config) as running:
        yield running


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Path:
    return module_shots(request)


def _state_of(page: Any, model: str) -> str:
    value: str = page.get_attribute(f'article[data-model="{model}"]', "data-state")
    return value


def test_models_page_renders_the_config(chromium: Path, stack: Stack, shots: Path) -> None:
    with ui_page(chromium, stack.url + "/") as page:  # `/` redirects to /ui/
        page.wait_for_selector('article[data-model="a"]')
        page.wait_for_selector('article[data-model="b"]')
        assert page.url == stack.url + "/ui/"
        ids = page.eval_on_selector_all(
            "article[data-model]", "els => els.map(e => e.dataset.model)"
        )
        assert ids == ["a", "b"]
        assert page.text_content('article[data-model="b"] .desc') == "Model B"
        for model in ("a", "b"):
            assert _state_of(page, model) == stack.model(model)["state"]
        page.wait_for_selector("#conn.live")
        # This config has no `profiles`: no profile control (test_ui_browser_controls.py has
        # a config with them).
        assert json.loads(call(stack.url + "/api/profiles")[2])["profiles"] == []
        page.wait_for_selector('#profile-box[data-loaded="200"]', state="attached")
        assert page.get_attribute("#profile-box", "hidden") is not None
        assert not page.is_visible("#profile")
        assert page.errors == []


def test_a_swap_shows_live_then_in_the_timeline(chromium: Path, stack: Stack, shots: Path) -> None:
    stack.swapd("unload")
    with ui_page(chromium, stack.url + "/ui/") as page:
        page.wait_for_selector("#conn.live")
        chat(stack.url, "a")
        page.wait_for_selector('article[data-model="a"][data-state="ready"]')
        # `b` starts slowly (health answers after 1.5 s): the page shows it starting, with the
        # time it has been starting, then ready, and `a` stopped (swapped out).
        done = threading.Event()
        threading.Thread(target=lambda: (chat(stack.url, "b"), done.set()), daemon=True).start()
        page.wait_for_selector('article[data-model="b"][data-state="starting"]')
        page.wait_for_selector('article[data-model="b"] [data-since]')
        page.wait_for_selector('article[data-model="b"][data-state="ready"]', timeout=30_000)
        assert _state_of(page, "a") == "stopped"
        assert done.wait(30)
        tab(page, "swaps")
        row = page.wait_for_selector('#swap-table tr[data-kind="swap"][data-model="b"]')
        text = row.text_content() or ""
        assert "a → b" in text and "a request for b" in text
        for phase in ("drain", "stop", "start", "health"):
            assert phase in text
        # The same record through the API, with the health phase the slow start took.
        swaps = json.loads(call(stack.url + "/api/swaps")[2])["swaps"]
        swap = [s for s in swaps if s["kind"] == "swap" and s["model"] == "b"][-1]
        assert swap["evicted"] == ["a"] and swap["cause"] == "request"
        assert swap["phases"]["health"] >= 1.0
        assert str(swap["id"]) == row.get_attribute("data-swap")
        assert page.errors == []


def test_the_unload_button_unloads(chromium: Path, stack: Stack) -> None:
    chat(stack.url, "a")
    with ui_page(chromium, stack.url + "/ui/") as page:
        page.wait_for_selector('article[data-model="a"][data-state="ready"]')
        page.wait_for_selector('article[data-model="a"] [data-until]')  # the TTL counting down
        page.click('article[data-model="a"] button[data-action="unload"]')
        page.wait_for_selector('article[data-model="a"][data-state="stopped"]')
        assert stack.model("a")["state"] == "stopped"
        # And Load starts it again.
        page.click('article[data-model="a"] button[data-action="load"]')
        page.wait_for_selector('article[data-model="a"][data-state="ready"]')
        assert stack.model("a")["state"] == "ready"
        assert page.errors == []


def test_a_model_log_streams_new_lines_in_colour(chromium: Path, stack: Stack) -> None:
    stack.swapd("unload")
    with ui_page(chromium, stack.url + "/ui/#logs") as page:
        page.select_option("#log-source", "b")
        before = page.locator("#log span.fg-31", has_text=COLOUR).count()
        chat(stack.url, "b")  # a start of `b` writes the coloured line again
        pid = stack.model("b")["pid"]
        wait_for(
            lambda: page.locator("#log span.fg-31", has_text=COLOUR).count() > before,
            15,
            what="the new coloured line",
        )
        page.wait_for_selector(f"#log .line:has-text('starting on port') >> text=pid {pid}")
        # The filter keeps only matching lines.
        page.fill("#log-filter", "starting on port")
        lines = page.eval_on_selector_all("#log .line", "els => els.map(e => e.textContent)")
        assert lines and all("starting on port" in line for line in lines)
        assert page.errors == []


def test_an_activity_row_with_its_token_speed(chromium: Path, stack: Stack) -> None:
    with ui_page(chromium, stack.url + "/ui/#activity") as page:
        page.wait_for_selector("#conn.live")
        chat(stack.url, "a")
        activity = json.loads(call(stack.url + "/api/metrics/activity?limit=1")[2])["data"][0]
        assert activity["tokens"]["tokens_per_second"] > 0
        row = page.wait_for_selector(f'#activity-table tr[data-activity="{activity["id"]}"]')
        speed = row.query_selector('[data-role="speed"]').text_content() or ""
        assert speed.startswith(f"{activity['tokens']['tokens_per_second']:.1f}")
        assert "a" in (row.text_content() or "") and "200" in (row.text_content() or "")
        assert page.errors == []


def test_in_flight_request_cancelled_from_the_page(chromium: Path, stack: Stack) -> None:
    chat(stack.url, "a")
    with ui_page(chromium, stack.url + "/ui/#activity") as page:
        page.wait_for_selector("#conn.live")
        ended = threading.Event()

        def slow() -> None:
            # A model route: llama-swap's in-flight table (and so this page's) lists those only.
            body = {"model": "a", "messages": [], "stream": True, "x_chunks": 400, "x_delay": 0.05}
            request = urllib.request.Request(
                stack.url + CHAT,
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    response.read()
            except Exception:
                pass
            ended.set()

        threading.Thread(target=slow, daemon=True).start()
        button = page.wait_for_selector("#inflight tr[data-inflight] button")
        # The row says who asked (the client's User-Agent) and how much of the answer has gone
        # out so far, counting up in place as the response streams.
        row = "#inflight tr[data-inflight]"
        assert (page.text_content(f'{row} [data-role="client"]') or "").startswith("Python-urllib/")
        page.wait_for_selector(f'{row} [data-role="sent"]:not(:text-is("0 B"))')
        assert button.evaluate("b => b.isConnected")  # the same row, updated in place
        button.click()
        # 400 chunks at 0.05 s would take 20 s: ended within 15 s, the request was cut.
        assert ended.wait(15), "the cancelled request did not end"
        page.wait_for_selector("#inflight tr.empty")
        assert page.errors == []


def test_every_page_at_desktop_and_phone_width(chromium: Path, stack: Stack, shots: Path) -> None:
    chat(stack.url, "a")
    for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        with ui_page(chromium, stack.url + "/ui/", viewport=viewport) as page:
            page.wait_for_selector('article[data-model="a"][data-state="ready"]')
            for name in ("models", "playground", "activity", "swaps", "logs"):
                tab(page, name)
                page.wait_for_timeout(300)  # the last rows' highlight fades
                path = shoot(page, shots, f"{label}-{name}")
                assert path.stat().st_size > 0
            # Nothing wider than the screen at phone width (the tables scroll inside their box).
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= viewport["width"]
            assert page.errors == []


def test_with_api_keys_nothing_answers_without_the_key(
    chromium: Path, stack_factory: Callable[..., Stack]
) -> None:
    (port,) = model_ports(1)
    stack = stack_factory({"apiKeys": ["sekret-key"], "models": {"a": local_model("a", port)}})
    paths = (
        "/", "/upstream", "/ui", "/ui/", "/ui/main.js", "/ui/app.css", "/api/status",
        "/api/swaps", "/api/events", "/running", "/logs", "/api/metrics/activity",
        "/api/inflight", "/v1/models",
    )  # fmt: skip
    for path in paths:
        status, headers, _ = call(stack.url + path)
        assert status == 401, path
        assert headers.get("WWW-Authenticate") == 'Basic realm="swapd"', path
        assert call(stack.url + path, password="wrong")[0] == 401, path
    for path in ("/ui/", "/ui/main.js", "/api/status", "/api/swaps"):
        assert call(stack.url + path, password="sekret-key")[0] == 200, path
    # `/` sends a browser (it accepts HTML) to the page (others get Ollama's answer there).
    browser = {"Accept": "text/html"}
    assert call(stack.url + "/", password="sekret-key", headers=browser)[1]["Location"] == "/ui/"
    with ui_page(chromium, "") as page:
        answer = page.request.get(stack.url + "/ui/")
        assert answer.status == 401
        assert answer.headers["www-authenticate"] == 'Basic realm="swapd"'
        # The browser itself is asked for credentials, and with none to give, gets no page.
        from playwright.sync_api import Error as PlaywrightError

        with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
            page.goto(stack.url + "/ui/")
    with ui_page(chromium, stack.url + "/ui/", password="sekret-key") as page:
        page.wait_for_selector('article[data-model="a"]')
        page.wait_for_selector("#conn.live")  # the event stream got in too
        assert page.errors == []


def test_gpus_page_shows_memory_and_holders(
    chromium: Path, stack_factory: Callable[..., Stack], shots: Path
) -> None:
    # The fake GPU backend stands for NVML (docs/gpus.md): two GPUs; `g` holds 2 GiB on GPU 0.
    (port,) = model_ports(1)
    held = 2 * 1024**3
    model = {**local_model("g", port, gpus=[0]), "env": [f"SWAPD_FAKE_GPU_MEM={held}"]}
    stack = stack_factory(
        {"healthCheckTimeout": 15, "models": {"g": model}},
        env={"SWAPD_GPU_BACKEND": "fake", "SWAPD_FAKE_GPUS": "2"},
    )
    chat(stack.url, "g")
    status = json.loads(call(stack.url + "/api/status")[2])
    gpu0 = next(g for g in status["gpus"] if g["index"] == 0)
    assert gpu0["used_bytes"] == held
    for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        with ui_page(chromium, stack.url + "/ui/#gpus", viewport=viewport) as page:
            page.wait_for_selector("#gpus-tab:not([hidden])")
            card = f'#gpu-cards article[data-gpu="{gpu0["uuid"]}"]'
            page.wait_for_selector(f'{card} [data-holder="g"]')
            text = page.text_content(card) or ""  # the card as drawn now, not a first drawing
            assert "2.0 GiB of" in text and "g (ready)" in text
            assert page.locator("#gpu-cards article").count() == 2
            shoot(page, shots, f"{label}-gpus")
            assert page.errors == []


def test_failed_start_remote_models_and_two_proxy_processes(
    chromium: Path, stack_factory: Callable[..., Stack]
) -> None:
    """A model that fails to start shows its reason and its log's tail; a peer's models are
    marked remote; with two proxy processes the page shows what the daemon knows, whichever
    process serves it (the request and the activity row may come from the other one)."""
    ok, broken, peer = model_ports(3)
    config = {
        "healthCheckTimeout": 15,
        "models": {"ok": local_model("ok", ok), "broken": local_model("broken", broken, "--fail")},
        "peers": {"far": {"proxy": f"http://127.0.0.1:{peer}", "models": ["remote-one"]}},
    }
    stack = stack_factory(config, proxy_processes=2)
    with ui_page(chromium, stack.url + "/ui/") as page:
        page.wait_for_selector("#conn.live")
        remote = page.wait_for_selector('article[data-model="far/remote-one"]')
        assert "remote" in (remote.text_content() or "")
        assert remote.query_selector("button") is None  # nothing to load or unload here
        page.click('article[data-model="broken"] button[data-action="load"]')
        page.wait_for_selector('article[data-model="broken"][data-state="failed"]')
        page.wait_for_selector('article[data-model="broken"] pre.tail')
        # The card turns failed on the event; its reason comes with the status fetch after it,
        # which draws the card again: it is read from the page, not from a handle to the first.
        page.wait_for_selector('article[data-model="broken"] [data-role="reason"]')
        reason = stack.model("broken")["reason"]
        assert reason and reason in (page.text_content('article[data-model="broken"]') or "")
        tail = page.text_content('article[data-model="broken"] pre.tail') or ""
        assert "error: broken cannot load its weights" in tail
        for _ in range(4):  # spread over both processes
            chat(stack.url, "ok")
        tab(page, "activity")
        wait_for(
            lambda: page.locator('#activity-table tr[data-model="ok"]').count() == 4,
            15,
            what="four activity rows for ok",
        )
        assert page.errors == []
