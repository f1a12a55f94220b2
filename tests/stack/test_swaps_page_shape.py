"""What the web UI's Swaps page (proxy/ui/static/swaps.js) reads of `/api/swaps` after a sleep and
a wake (issue 41): a `sleep` record and a `wake` record, each with its own phase, and every kind
and phase the daemon sends is one the page names (it showed both as "stop <model>", their phases
missing). The page's words are read from swaps.js itself; the browser's view of the same is
tests/real/test_ui_sleep.py. And the load estimate a model's status carries from its own past
loads and wakes: none before the first."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from tests.support.daemon import chat
from tests.support.paths import REPO
from tests.support.sleeping import config, gpu_env, vllm_model
from tests.support.stack import Stack

pytestmark = pytest.mark.processes

SWAPS_JS = (REPO / "proxy" / "ui" / "static" / "swaps.js").read_text()


def _page_phases() -> set[str]:
    found = re.search(r"export const PHASES = \[([^\]]*)\]", SWAPS_JS)
    assert found is not None, "swaps.js lists the phases it draws"
    return set(re.findall(r'"(\w+)"', found.group(1)))


def _page_kinds() -> set[str]:
    # `what()` names each kind; a stop is what is left.
    return set(re.findall(r'r\.kind === "(\w+)"', SWAPS_JS)) | {"stop"}


def test_a_sleep_and_a_wake_as_the_swaps_page_reads_them(stack_factory, tmp_path: Path) -> None:
    stack: Stack = stack_factory(config({"a": vllm_model("a", tmp_path / "vllm.jsonl")}),
                                 env=gpu_env())  # fmt: skip
    before = stack.model("a")
    assert before["load_estimate"] is None and before["wake_estimate"] is None
    chat(stack.url, "a")
    request = urllib.request.Request(stack.url + "/api/models/sleep/a", method="POST")
    with urllib.request.urlopen(request, timeout=60) as resp:
        assert json.load(resp)["state"] == "asleep"
    chat(stack.url, "a")  # woken
    _, body = stack.get_json("/api/swaps")
    records = body["swaps"]
    assert [r["kind"] for r in records] == ["start", "sleep", "wake"]
    start, sleep, wake = records
    assert sleep["cause"] == "sleep" and "sleep" in sleep["phases"]
    assert "wake" in wake["phases"] and wake["result"] == "ok"
    assert {r["kind"] for r in records} <= _page_kinds()
    assert {p for r in records for p in r["phases"]} <= _page_phases()

    after = stack.model("a")
    assert after["load_estimate"] == pytest.approx(
        start["phases"]["start"] + start["phases"].get("health", 0.0), abs=0.01
    )
    assert after["wake_estimate"] == pytest.approx(wake["phases"]["wake"], abs=0.01)
