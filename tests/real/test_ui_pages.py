"""The web UI's Models page additions, the page per model, the light/dark theme, and a screenshot
of every page, in Debian's real chromium (Playwright, as tests/real/test_ui_browser.py) against the
real stack with fake model processes on loopback. What the page shows is checked against swapd's
own interfaces (`/api/status`, `/v1/models`, `/api/metrics/*`, `/api/swaps`, the model's log)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import chat
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for
from tests.support.ui import DESKTOP, PHONE, module_shots, shoot, tab, ui_page

pytestmark = [pytest.mark.processes, pytest.mark.browser]

NEWEST = "error: broken cannot find its weights (the newest line)"
CAPABILITIES = {"in": ["text", "image"], "out": ["text"], "tools": True, "context": 32768}


def _broken(port: int) -> dict[str, Any]:
    """A model that prints 80 lines, then its error as the last one, and exits 1: a log far
    longer than its card's box, whose cause is at the bottom."""
    code = (
        "import sys; [print('loading tensor %d of 80' % i) for i in range(80)]; "
        f"print('{NEWEST}'); sys.exit(1)"
    )
    return {"cmd": f'{sys.executable} -c "{code}"', "proxy": f"http://127.0.0.1:{port}"}


@pytest.fixture(scope="module")
def stack(chromium: Path) -> Iterator[Stack]:  # no browser, no stack: skipped before it starts
    a, b, broken = model_ports(3)
    config = {
        "healthCheckTimeout": 15,
        "models": {
            "a": {
                **local_model("a", a, ttl=600),
                "name": "Model A",
                "description": "a fake llama-server",
                "aliases": ["alpha"],
                "capabilities": CAPABILITIES,
                "metadata": {"family": "fake"},
            },
            "b": local_model("b", b, "--health-delay", "1", ttl=600),
            "broken": _broken(broken),
        },
        "selectors": {"pick": {"strategy": "warm", "targets": ["a", "b"]}},
    }
    with Stack(config) as running:
        yield running


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Path:
    return module_shots(request)


def _entry(stack: Stack, model: str) -> dict[str, Any]:
    entries = stack.get_ok("/v1/models")["data"]
    found: dict[str, Any] = next(e for e in entries if e["id"] == model)
    return found


def test_models_page_capability_tags_links_and_selectors(chromium: Path, stack: Stack) -> None:
    entry = _entry(stack, "a")
    assert entry["capabilities"] == {"vision": True, "function_calling": True}
    assert entry["context_length"] == 32768
    with ui_page(chromium, stack.url + "/ui/") as page:
        card = 'article[data-model="a"]'
        page.wait_for_selector(f'{card} .tag[data-cap="vision"]')
        caps = page.eval_on_selector_all(f"{card} .tag", "els => els.map(e => e.dataset.cap)")
        assert caps == ["vision", "function_calling", "context"]
        assert page.text_content(f'{card} .tag[data-cap="context"]') == "33K ctx"
        assert page.locator('article[data-model="b"] .tag').count() == 0  # none configured
        # The selector, as /v1/models lists it, with its targets linked to their pages.
        row = page.wait_for_selector('#selectors tr[data-selector="pick"]')
        assert "warm" in (row.text_content() or "")
        targets = row.eval_on_selector_all("[data-target]", "els => els.map(e => e.dataset.target)")
        assert targets == _entry(stack, "pick")["meta"]["llamaswap"]["targets"] == ["a", "b"]
        # A card's name is the link to the model's page; the keyboard follows it too.
        page.focus(f"{card} a.name")
        page.keyboard.press("Enter")
        page.wait_for_selector('#page-model:not([hidden]) [data-role="facts"]')
        assert page.url.endswith("#model/a")
        assert page.errors == []


def test_the_model_page_shows_what_swapd_knows(chromium: Path, stack: Stack) -> None:
    chat(stack.url, "alpha")  # through the alias: a start of `a`, a request, a swap record
    status = stack.model("a")
    # The daemon has the request's record (records come in batches, after the answer).
    (record,) = wait_for(
        lambda: stack.get_ok("/api/metrics/activity?model=a&limit=1")["data"], 15, what="a record"
    )
    with ui_page(chromium, stack.url + "/ui/#model/a") as page:
        view = "#model-view"
        page.wait_for_selector(f'{view} [data-role="state"]:text("ready")')
        # The facts come from /api/status and /v1/models, read after the first events.
        page.wait_for_selector(f'{view} [data-role="facts"] .tag[data-cap="context"]')

        def with_pid() -> str | None:
            text = (page.text_content(f'{view} [data-role="facts"]') or "").replace(" ", "")
            return text if f"pid{status['pid']}" in text else None

        facts = wait_for(with_pid, 15, what="the pid among the facts")
        assert facts is not None
        assert "aliasesalpha" in facts
        assert "32768tokens(33K)" in facts
        assert "familyfake" in facts
        caps = page.eval_on_selector_all(
            f'{view} [data-role="facts"] .tag', "els => els.map(e => e.dataset.cap)"
        )
        assert caps == ["vision", "function_calling", "context"]
        # Its command, as swapd logged it when it started the model.
        cmd = page.wait_for_selector(f'{view} [data-role="cmd"]').text_content() or ""
        assert "fake_model.py" in cmd and "--name a" in cmd
        assert cmd in stack.model_log("a")
        # Its log, streamed, opened at the newest line.
        page.wait_for_selector(f"{view} .log .line:has-text('starting a')")
        at_end = page.eval_on_selector(
            f"{view} .log", "n => n.scrollHeight - n.scrollTop - n.clientHeight < 24"
        )
        assert at_end
        # Its activity: the daemon's totals for it, and the request as a row.
        page.wait_for_selector(f'{view} [data-role="recent"] tr[data-activity="{record["id"]}"]')
        stats = stack.get_ok("/api/metrics/stats?model=a")
        shown = page.text_content(f'{view} [data-total="requests"] dd')
        assert shown == str(stats["total_requests"])
        gen = page.get_attribute(f'{view} [data-histogram="gen"]', "data-count")
        assert gen == str(sum(stats["gen_histogram"]["bins"]))
        # Its swaps, as /api/swaps has them.
        swaps = [s for s in stack.get_ok("/api/swaps")["swaps"] if s["model"] == "a"]
        page.wait_for_selector(f'{view} [data-role="swaps"] tr[data-swap="{swaps[-1]["id"]}"]')
        # The sleep panel says it has no sleep setting (and there is no Sleep button); no
        # busyCheck here.
        assert page.text_content(f'{view} [data-slot="sleep"]') == (
            "Sleepno sleep setting: it is stopped, never put to sleep"
        )
        assert page.query_selector(f'{view} button[data-action="sleep"]') is None
        assert "no busyCheck reading" in (page.text_content(f'{view} [data-role="busy"]') or "")
        # Unload and Load from its page.
        page.click(f'{view} button[data-action="unload"]')
        page.wait_for_selector(f'{view} [data-role="state"]:text("stopped")')
        assert stack.model("a")["state"] == "stopped"
        page.click(f'{view} button[data-action="load"]')
        page.wait_for_selector(f'{view} [data-role="state"]:text("ready")')
        assert stack.model("a")["state"] == "ready"
        assert page.errors == []


def test_an_unknown_model_page_says_so(chromium: Path, stack: Stack) -> None:
    with ui_page(chromium, stack.url + "/ui/#model/no-such-model") as page:
        page.wait_for_selector('#model-view [data-role="missing"]')
        assert page.errors == []


def test_a_failed_models_log_opens_at_its_newest_line(chromium: Path, stack: Stack) -> None:
    with ui_page(chromium, stack.url + "/ui/") as page:
        card = 'article[data-model="broken"]'
        page.click(f'{card} button[data-action="load"]')
        page.wait_for_selector(f'{card}[data-state="failed"] pre.tail:has-text("{NEWEST}")')
        box = page.eval_on_selector(
            f"{card} pre.tail",
            "n => ({top: n.scrollTop, height: n.scrollHeight, client: n.clientHeight})",
        )
        assert box["height"] > box["client"]  # the tail is longer than its box ...
        assert box["top"] + box["client"] >= box["height"] - 2  # ... and shows its end
        text = page.text_content(f"{card} pre.tail") or ""
        assert text.rstrip().endswith(NEWEST)
        # Back on the page after another tab: still at the newest line.
        tab(page, "swaps")
        tab(page, "models")
        assert page.eval_on_selector(
            f"{card} pre.tail", "n => n.scrollTop + n.clientHeight >= n.scrollHeight - 2"
        )
        assert page.errors == []


def _background(page: Any) -> str:
    value: str = page.evaluate("getComputedStyle(document.body).backgroundColor")
    return value


def _dark(colour: str) -> bool:
    r, g, b = (int(x) for x in colour[colour.index("(") + 1 : colour.index(")")].split(",")[:3])
    return (r + g + b) / 3 < 128


def test_the_theme_follows_the_system_and_the_setting(chromium: Path, stack: Stack) -> None:
    with ui_page(chromium, stack.url + "/ui/") as page:
        page.wait_for_selector('article[data-model="a"]')
        assert page.input_value("#theme") == "system"
        page.emulate_media(color_scheme="dark")
        wait_for(lambda: _dark(_background(page)), 5, what="dark, as the system")
        page.emulate_media(color_scheme="light")
        wait_for(lambda: not _dark(_background(page)), 5, what="light, as the system")
        # The setting wins over the system, and is kept.
        page.select_option("#theme", "dark")
        assert _dark(_background(page))
        page.reload()
        page.wait_for_selector('article[data-model="a"]')
        assert page.input_value("#theme") == "dark" and _dark(_background(page))
        page.select_option("#theme", "light")
        page.emulate_media(color_scheme="dark")
        assert not _dark(_background(page))
        # Back to the system's choice.
        page.select_option("#theme", "system")
        assert _dark(_background(page))
        assert page.get_attribute("html", "data-theme") is None
        assert page.errors == []


def test_a_swap_row_shows_the_wait_its_record_carries(chromium: Path, stack: Stack) -> None:
    """A swap record whose `waited` (the seconds its request waited) is more than its phases
    shows it; the others do not. `/api/swaps` is answered by the browser here (Playwright's
    route) with swapd's own records, the last with a long wait such as a busy model causes (the
    daemon's own, from a real busy wait: tests/real/test_ui_waits.py)."""
    chat(stack.url, "b")
    swaps = stack.get_ok("/api/swaps")["swaps"]
    waited = {**swaps[-1], "waited": 59.25}
    with ui_page(chromium, "") as page:
        page.route(
            "**/api/swaps",
            lambda route: route.fulfill(
                json={"swaps": [*swaps[:-1], waited]}, headers={"Cache-Control": "no-store"}
            ),
        )
        page.goto(stack.url + "/ui/#swaps")
        row = page.wait_for_selector(f'#swap-table tr[data-swap="{waited["id"]}"]')
        assert row.query_selector('[data-role="waited"]').text_content() == "request waited 59.3 s"
        others = [s for s in swaps[:-1]]
        for other in others:
            cell = f'#swap-table tr[data-swap="{other["id"]}"] [data-role="waited"]'
            assert page.query_selector(cell) is None
        assert page.errors == []


def test_every_page_at_both_widths_in_both_themes(
    chromium: Path, stack: Stack, shots: Path
) -> None:
    chat(stack.url, "a")
    chat(stack.url, "b")
    pages = ("models", "model/a", "playground", "activity", "swaps", "logs")
    for theme in ("light", "dark"):
        for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
            with ui_page(chromium, stack.url + "/ui/", viewport=viewport) as page:
                page.emulate_media(color_scheme=theme)
                page.wait_for_selector('article[data-model="b"][data-state="ready"]')
                for name in pages:
                    page.evaluate("name => { location.hash = name; }", name)
                    section = name.split("/")[0]
                    page.wait_for_selector(f"#page-{section}:not([hidden])")
                    if name == "model/a":
                        page.wait_for_selector('#model-view [data-role="recent"] tr[data-activity]')
                    page.wait_for_timeout(300)  # the last rows' highlight fades
                    shoot(page, shots, f"{label}-{theme}-{name.replace('/', '-')}")
                    width = page.evaluate("document.documentElement.scrollWidth")
                    assert width <= viewport["width"], name
                assert page.errors == []
