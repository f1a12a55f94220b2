"""The Activity page's request table in Debian's real chromium (Playwright, as
tests/real/test_ui_browser.py) against the real stack: the totals and speed histograms, the
filters (model, status, route, text), sorting, the columns chosen (kept across a reload) and the
export (CSV and JSON), each checked against the activity API's own records."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for
from tests.support.ui import call, module_shots, shoot, ui_page

pytestmark = [pytest.mark.processes, pytest.mark.browser]

CHAT = "/v1/chat/completions"
ROWS = "#activity-table tbody tr[data-activity]"


def _post(stack: Stack, path: str, model: str) -> int:
    status, _, _ = call(stack.url + path, "POST", {"model": model, "messages": []})
    return status


@pytest.fixture(scope="module")
def stack(chromium: Path) -> Iterator[Stack]:  # no browser, no stack: skipped before it starts
    a, b = model_ports(2)
    config = {
        "healthCheckTimeout": 15,
        "models": {"a": local_model("a", a, ttl=600), "b": local_model("b", b, ttl=600)},
    }
    with Stack(config) as running:
        # Three chats for a, two for b (a swap each way), one through /upstream/, one refused.
        for model in ("a", "a", "b", "b", "a"):
            assert _post(running, CHAT, model) == 200
        assert _post(running, "/upstream/a" + CHAT, "a") == 200
        assert _post(running, CHAT, "no-such-model") == 404
        wait_for(lambda: len(_records(running)) == 7, 15, what="seven activity records")
        yield running


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Path:
    return module_shots(request)


def _records(stack: Stack, query: str = "") -> list[dict[str, Any]]:
    status, _, body = call(stack.url + "/api/metrics/activity?limit=100" + query)
    assert status == 200, body
    data: list[dict[str, Any]] = json.loads(body)["data"]
    return data


def _stats(stack: Stack, model: str = "") -> dict[str, Any]:
    stats: dict[str, Any] = json.loads(call(stack.url + f"/api/metrics/stats?model={model}")[2])
    return stats


def _shown_ids(page: Any) -> list[int]:
    ids = page.eval_on_selector_all(ROWS, "rows => rows.map(r => Number(r.dataset.activity))")
    return list(ids)


def _total(page: Any, name: str) -> str:
    value: str = page.text_content(f'#activity-summary [data-total="{name}"] dd')
    return value


def _filter(page: Any, name: str, value: str) -> None:
    page.select_option(f'#activity-tools select[data-filter="{name}"]', value)


def test_totals_histograms_and_filters(chromium: Path, stack: Stack, shots: Path) -> None:
    records = _records(stack)
    with ui_page(chromium, stack.url + "/ui/#activity") as page:
        wait_for(lambda: len(_shown_ids(page)) == 7, 15, what="seven rows")
        assert _shown_ids(page) == [r["id"] for r in records]  # newest first, as the API
        stats = _stats(stack)
        assert _total(page, "requests") == str(stats["total_requests"]) == "7"
        assert _total(page, "errors") == "1"
        assert _total(page, "output") == str(stats["total_output_tokens"])
        assert _total(page, "input") == str(stats["total_input_tokens"])
        for kind, key in (("gen", "gen_histogram"), ("prompt", "prompt_histogram")):
            count = page.get_attribute(f'[data-histogram="{kind}"]', "data-count")
            assert count == str(sum(stats[key]["bins"]))
        shoot(page, shots, "desktop-activity-all")

        # By model: the rows and the totals are b's, as the daemon's stats for b say.
        _filter(page, "model", "b")
        assert _shown_ids(page) == [r["id"] for r in records if r["model"] == "b"]
        assert _total(page, "requests") == str(_stats(stack, "b")["total_requests"]) == "2"
        _filter(page, "model", "")
        # By status: the refused request alone.
        _filter(page, "status", "errors")
        assert _shown_ids(page) == [r["id"] for r in records if r["resp_status_code"] >= 400]
        assert page.text_content(f'{ROWS} [data-col="status"]') == "404"
        _filter(page, "status", "2xx")
        assert len(_shown_ids(page)) == 6
        _filter(page, "status", "")
        # By route, and by text.
        _filter(page, "route", "upstream")
        assert _shown_ids(page) == [r["id"] for r in records if r["route"] == "upstream"]
        _filter(page, "route", "")
        page.fill('#activity-tools [data-filter="text"]', "no-such")
        assert _shown_ids(page) == [r["id"] for r in records if r["model"] == "no-such-model"]
        page.fill('#activity-tools [data-filter="text"]', "")
        assert len(_shown_ids(page)) == 7
        # A model's page links here with its filter set.
        page.goto(stack.url + "/ui/#activity/a")
        wait_for(lambda: len(_shown_ids(page)) == 4, 15, what="a's four rows")
        assert page.input_value('#activity-tools select[data-filter="model"]') == "a"
        assert page.errors == []


def test_sorting_by_a_column(chromium: Path, stack: Stack) -> None:
    records = _records(stack)
    by_duration = [r["id"] for r in sorted(records, key=lambda r: (r["duration_ms"], -r["id"]))]
    with ui_page(chromium, stack.url + "/ui/#activity") as page:
        wait_for(lambda: len(_shown_ids(page)) == 7, 15, what="seven rows")
        page.click('#activity-table thead button[data-sort="duration"]')
        duration = '#activity-table th[data-col="duration"]'
        assert page.get_attribute(duration, "aria-sort") == "ascending"
        assert _shown_ids(page) == by_duration
        # The keyboard sorts too: the header is a button.
        page.focus('#activity-table thead button[data-sort="duration"]')
        page.keyboard.press("Enter")
        assert page.get_attribute(duration, "aria-sort") == "descending"
        descending = [r["id"] for r in sorted(records, key=lambda r: (-r["duration_ms"], -r["id"]))]
        assert _shown_ids(page) == descending
        page.click('#activity-table thead button[data-sort="model"]')
        models = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.model)")
        assert models == sorted(models)
        assert page.errors == []


def test_the_columns_chosen_are_kept(chromium: Path, stack: Stack) -> None:
    records = _records(stack)
    with ui_page(chromium, stack.url + "/ui/#activity") as page:
        wait_for(lambda: len(_shown_ids(page)) == 7, 15, what="seven rows")
        assert page.query_selector('#activity-table th[data-col="id"]') is None  # off by default
        page.click("#activity-tools details.columns > summary")
        page.uncheck('#activity-tools input[data-column="route"]')
        page.check('#activity-tools input[data-column="id"]')
        page.check('#activity-tools input[data-column="bytes"]')
        for _ in range(2):  # as chosen, then after a reload (localStorage)
            assert page.query_selector('#activity-table th[data-col="route"]') is None
            assert page.query_selector(f'{ROWS} td[data-col="route"]') is None
            ids = page.eval_on_selector_all(
                f'{ROWS} td[data-col="id"]', "cells => cells.map(c => Number(c.textContent))"
            )
            assert ids == [r["id"] for r in records]
            sizes = page.eval_on_selector_all(
                f'{ROWS} td[data-col="bytes"]', "cells => cells.map(c => c.textContent)"
            )
            assert sizes == [f"{r['bytes']:,}" for r in records]
            page.reload()
            wait_for(lambda: len(_shown_ids(page)) == 7, 15, what="seven rows again")
        assert page.errors == []


def test_export_csv_and_json_hold_what_the_filters_select(chromium: Path, stack: Stack) -> None:
    mine = _records(stack, "&model=a")
    with ui_page(chromium, stack.url + "/ui/#activity") as page:
        wait_for(lambda: len(_shown_ids(page)) == 7, 15, what="seven rows")
        _filter(page, "model", "a")
        with page.expect_download() as csv_download:
            page.click('#activity-tools button[data-export="csv"]')
        assert csv_download.value.suggested_filename.endswith(".csv")
        text = Path(csv_download.value.path()).read_text()
        rows = list(csv.DictReader(io.StringIO(text)))
        assert [int(r["id"]) for r in rows] == [r["id"] for r in mine]
        for row, record in zip(rows, mine, strict=True):
            assert row["model"] == "a" and row["req_path"] == record["req_path"]
            assert float(row["duration_ms"]) == record["duration_ms"]
            assert int(row["output_tokens"]) == record["tokens"]["output_tokens"]
            assert float(row["tokens_per_second"]) == record["tokens"]["tokens_per_second"]
        with page.expect_download() as json_download:
            page.click('#activity-tools button[data-export="json"]')
        exported = json.loads(Path(json_download.value.path()).read_text())
        assert exported == mine  # the API's records, as read
        assert page.errors == []
