"""The web UI's sleep controls in Debian's real chromium (Playwright) against the real stack, the
vLLM stand-in on a fake GPU: the Models card's Sleep button puts a model to sleep (its badge
`asleep`, what it still holds), Wake (Load while asleep) wakes it in the same process, and the
model page's Sleep panel shows its residual and its last sleep and wake; a model without a sleep
setting has no Sleep button. The Swaps page shows a sleep and a wake as such, with their own
phases (they read "stop a" once), and an asleep model's card how long its wake takes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import chat
from tests.support.sleeping import MIB, config, gpu_env, plain_model, vllm_model
from tests.support.stack import Stack
from tests.support.ui import call, module_shots, shoot, ui_page

pytestmark = [pytest.mark.processes, pytest.mark.browser]


@pytest.fixture(scope="module")
def stack(chromium: Path) -> Iterator[Stack]:  # no browser, no stack: skipped before it starts
    running = Stack(config({}), env=gpu_env())
    log = running.base / "vllm.jsonl"
    residual = ("--residual", str(512 * MIB))
    running.write_config(config({"a": vllm_model("a", log, *residual), "b": plain_model("b")}))
    with running:
        yield running


def test_sleep_and_wake_from_the_models_page_and_the_sleep_panel(
    chromium: Path, stack: Stack, request: pytest.FixtureRequest
) -> None:
    chat(stack.url, "a")
    chat(stack.url, "b")
    chat(stack.url, "a")  # b stopped, a awake
    pid = stack.model("a")["pid"]
    with ui_page(chromium, stack.url + "/ui/") as page:
        card = 'article[data-model="a"]'
        page.wait_for_selector(f'{card}[data-state="ready"]')
        assert page.query_selector('article[data-model="b"] button[data-action="sleep"]') is None
        page.click(f'{card} button[data-action="sleep"]')
        page.wait_for_selector(f'{card}[data-state="asleep"]')
        assert stack.model("a")["state"] == "asleep" and stack.model("a")["pid"] == pid
        page.wait_for_selector(f'{card} dd:text("512.0 MiB")')  # what it holds asleep
        shoot(page, module_shots(request), "asleep-card")
        assert page.text_content(f'{card} button[data-action="load"]') == "Wake"
        page.click(f'{card} button[data-action="load"]')
        page.wait_for_selector(f'{card}[data-state="ready"]')
        assert stack.model("a")["pid"] == pid  # woken, not restarted
        # Its page: the Sleep panel, with its last sleep and wake.
        page.goto(stack.url + "/ui/#model/a")
        panel = '#model-view [data-slot="sleep"]'
        page.wait_for_selector(f'{panel} dl[data-sleep="awake"]')
        text = page.text_content(panel) or ""
        assert (
            "preset vllm" in text and "sleeps / wakes2 / 2" in text
        )  # the swap to b and back, then here
        page.click('#model-view button[data-action="sleep"]')
        page.wait_for_selector(f'{panel} dl[data-sleep="asleep"]')
        assert "512.0 MiB" in (page.text_content(panel) or "")
        assert page.errors == []


def test_the_swaps_page_shows_a_sleep_and_a_wake_with_their_phases(
    chromium: Path, stack: Stack, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    chat(stack.url, "a")  # awake (or woken), whatever ran before
    status, _, _ = call(stack.url + "/api/models/sleep/a", "POST")
    assert status == 200
    chat(stack.url, "a")  # woken, nothing to evict
    records = stack.get_ok("/api/swaps")["swaps"]
    slept = [r for r in records if r["kind"] == "sleep" and r["model"] == "a"][-1]
    woke = [r for r in records if r["kind"] == "wake" and r["model"] == "a"][-1]
    assert woke["id"] > slept["id"]
    with ui_page(chromium, stack.url + "/ui/#swaps") as page:
        asleep = f'#swap-table tr[data-swap="{slept["id"]}"]'
        awake = f'#swap-table tr[data-swap="{woke["id"]}"]'
        page.wait_for_selector(awake)
        assert page.get_attribute(asleep, "data-kind") == "sleep"
        assert page.text_content(f"{asleep} td:nth-child(2)") == "sleep a"
        assert page.text_content(f"{asleep} td:nth-child(3)") == "manual sleep"
        assert page.query_selector(f"{asleep} .phases .ph-sleep") is not None
        assert "sleep " in (page.text_content(f"{asleep} .phase-text") or "")
        assert page.get_attribute(awake, "data-kind") == "wake"
        assert page.text_content(f"{awake} td:nth-child(2)") == "wake a"
        assert page.text_content(f"{awake} td:nth-child(3)") == "a request for a"
        assert page.query_selector(f"{awake} .phases .ph-wake") is not None
        assert "wake " in (page.text_content(f"{awake} .phase-text") or "")
        shot = shoot(page, tmp_path, "swaps-after-a-sleep-and-a-wake")
        assert shot.stat().st_size > 0
        shoot(page, module_shots(request), "swaps-sleep-and-wake")  # for people to look at

        # Asleep again, its card says how long its wake takes, from its own last wakes.
        status, _, _ = call(stack.url + "/api/models/sleep/a", "POST")
        assert status == 200
        card = 'article[data-model="a"]'
        page.evaluate("name => { location.hash = name; }", "models")
        page.wait_for_selector(f'{card}[data-state="asleep"] dd[data-role="estimate"]')
        said = page.text_content(f'{card} dd[data-role="estimate"]') or ""
        assert re.fullmatch(r"about \d+(\.\d)? s", said), said
        assert stack.model("a")["wake_estimate"] is not None
        assert page.errors == []
