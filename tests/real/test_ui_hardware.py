"""The web UI's Hardware page in Debian's real chromium (Playwright) against the real stack, with
the fake GPU backend standing for NVML (`SWAPD_GPU_BACKEND=fake`, docs/gpus.md: two GPUs; a model
process whose CUDA_VISIBLE_DEVICES names one holds `SWAPD_FAKE_GPU_MEM` there, and the fake
figures follow what runs: busy, warm and drawing power while something holds memory). What the
page draws is checked against swapd's own `/api/performance`, `/api/hardware` and `/api/status`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import chat
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for
from tests.support.ui import DESKTOP, PHONE, call, module_shots, shoot, ui_page

pytestmark = [pytest.mark.processes, pytest.mark.browser]

HELD = 2 * 1024**3


@pytest.fixture(scope="module")
def stack(chromium: Path) -> Iterator[Stack]:  # no browser, no stack: skipped before it starts
    (port,) = model_ports(1)
    model = {**local_model("g", port, gpus=[0]), "env": [f"SWAPD_FAKE_GPU_MEM={HELD}"]}
    config = {"healthCheckTimeout": 15, "models": {"g": model}}
    env = {"SWAPD_GPU_BACKEND": "fake", "SWAPD_FAKE_GPUS": "2"}
    with Stack(config, env=env) as running:
        yield running


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Path:
    return module_shots(request)


def _legend(page: Any, card: str, chart: str) -> str:
    text: str = page.text_content(f'{card} [data-figure="{chart}"] .legend') or ""
    return text


def test_the_hardware_page_draws_the_host_and_each_gpu_over_time(
    chromium: Path, stack: Stack, shots: Path
) -> None:
    chat(stack.url, "g")
    gpus = {g["index"]: g for g in stack.get_ok("/api/status")["gpus"]}
    busy, idle = f'[data-hw-gpu="{gpus[0]["uuid"]}"]', f'[data-hw-gpu="{gpus[1]["uuid"]}"]'
    with ui_page(chromium, stack.url + "/ui/#hardware") as page:
        host = '[data-hw="host"]'
        page.wait_for_selector(f'{host} svg[data-chart="cpu"]')
        page.wait_for_selector(f'{host} svg[data-chart="memory"]')
        # What the machine is (`/api/hardware`, read once).
        hardware = stack.get_ok("/api/hardware")
        facts = page.text_content(f"{host} .facts") or ""
        if hardware["cpu"]["model"]:
            assert hardware["cpu"]["model"] in facts
        # Each GPU: a card with its three charts, and which model holds what there.
        page.wait_for_selector(f'{busy} [data-holder="g"]')
        for chart in ("gpu-memory", "gpu-util", "gpu-temp"):
            page.wait_for_selector(f'{busy} svg[data-chart="{chart}"]')
            page.wait_for_selector(f'{idle} svg[data-chart="{chart}"]')
        assert page.locator("[data-hw-gpu]").count() == 2
        # (with the bytes it holds once swapd has measured them: `footprint` in /api/status)
        assert (page.text_content(f"{busy} .holders") or "").startswith("g (ready)")
        assert page.text_content(f"{idle} .hint") == "no model on it"
        # The figures are the sampler's (the fake GPU: 70 °C and all of it in use while a
        # process holds memory there, 35 °C and idle otherwise).
        assert _legend(page, busy, "gpu-memory").startswith("used 2.0 GiB")
        assert _legend(page, busy, "gpu-temp").startswith("temperature 70 °C")
        assert _legend(page, busy, "gpu-util").startswith("utilisation 100 %")
        assert _legend(page, idle, "gpu-temp").startswith("temperature 35 °C")
        assert _legend(page, idle, "gpu-memory").startswith("used 0.0 GiB")

        # Over time: the page asks for the samples after its newest while it is shown.
        def two_points() -> bool:
            count = page.get_attribute(f'{busy} svg[data-chart="gpu-memory"]', "data-points")
            return int(count or 0) >= 2

        wait_for(two_points, 30, what="a second sample on the page")
        # The model stops: its memory goes, the chart keeps what it held.
        call(stack.url + "/api/models/unload/g", method="POST")
        wait_for(
            lambda: _legend(page, busy, "gpu-memory").startswith("used 0.0 GiB (peak 2.0 GiB)"),
            30,
            what="the memory chart after the unload",
        )
        assert page.text_content(f"{busy} .hint") == "no model on it"
        # Every sample the page drew is one the daemon has.
        performance = stack.get_ok("/api/performance")
        kept = [s for s in performance["gpu_stats"] if s["uuid"] == gpus[0]["uuid"]]
        drawn = int(page.get_attribute(f'{busy} svg[data-chart="gpu-memory"]', "data-points") or 0)
        assert 2 <= drawn <= len(kept)
        assert page.errors == []
        # Leaving the page stops the reading; coming back reads on from the newest.
        page.click('.tabs a[data-tab="models"]')
        page.wait_for_selector("#page-hardware[hidden]", state="attached")
        page.click('.tabs a[data-tab="hardware"]')
        page.wait_for_selector(f'{busy} svg[data-chart="gpu-memory"]')
        assert page.errors == []


def test_the_hardware_page_at_both_widths_in_both_themes(
    chromium: Path, stack: Stack, shots: Path
) -> None:
    chat(stack.url, "g")
    for theme in ("light", "dark"):
        for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
            with ui_page(chromium, stack.url + "/ui/#hardware", viewport=viewport) as page:
                page.emulate_media(color_scheme=theme)
                page.wait_for_selector('[data-hw-gpu] [data-holder="g"]')
                page.wait_for_selector('[data-hw="host"] svg[data-chart="cpu"]')
                # A sample taken since `g` holds its memory (they come every 5 s).
                page.wait_for_selector(
                    '[data-hw-gpu] [data-figure="gpu-memory"] .legend:has-text("used 2.0 GiB")',
                    timeout=30_000,
                )
                shoot(page, shots, f"{label}-{theme}-hardware")
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= viewport["width"]
                assert page.errors == []
