"""The web UI's sleep controls in Debian's real chromium (Playwright) against the real stack, the
vLLM stand-in on a fake GPU: the Models card's Sleep button puts a model to sleep (its badge
`asleep`, what it still holds), Wake (Load while asleep) wakes it in the same process, and the
model page's Sleep panel shows its residual and its last sleep and wake; a model without a sleep
setting has no Sleep button."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import chat
from tests.support.sleeping import MIB, config, gpu_env, plain_model, vllm_model
from tests.support.stack import Stack
from tests.support.ui import module_shots, shoot, ui_page

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
