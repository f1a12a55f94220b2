"""The SQLite activity store (`store.path`) against the real stack: records written, `swapd`
stopped and started again on the same file, the records still there (beyond
`metricsMaxInMemory`: the file is not pruned), ids continuing from the file's highest, and
`GET /api/metrics/activity` / `stats` answering from the file with the same filters, pagination
and validation errors (the config's checks: tests/unit/test_activity_store.py).
tests/support/upstreams/fake_model.py stands for llama-server."""

from __future__ import annotations

import json
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for

CHAT = "/v1/chat/completions"


def _post(stack: Stack, model: str) -> None:
    req = urllib.request.Request(
        stack.url + CHAT,
        data=json.dumps({"model": model, "messages": []}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200


def _total(stack: Stack, count: int) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        status, page = stack.get_json("/api/metrics/activity?limit=999&order=asc")
        assert status == 200, page
        return page if page["total"] >= count else None

    return wait_for(ready, 10, what=f"{count} activity records")


@pytest.mark.processes
def test_records_survive_swapd_restarted(
    stack_factory: Callable[..., Stack], tmp_path: Path
) -> None:
    db = tmp_path / "activity.db"
    alpha, beta = model_ports(2)
    config = {
        "healthCheckTimeout": 15,
        "metricsMaxInMemory": 2,
        "store": {"path": str(db)},
        "models": {"alpha": local_model("alpha", alpha), "beta": local_model("beta", beta)},
    }
    first = stack_factory(config)
    for model in ("alpha", "beta", "alpha", "alpha"):
        _post(first, model)
    before = _total(first, 4)["data"]
    assert [r["model"] for r in before] == ["alpha", "beta", "alpha", "alpha"]
    first.stop()
    # Written by then, in WAL mode: the file holds all four (more than metricsMaxInMemory).
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT COUNT(*) FROM activity").fetchone() == (4,)

    second = stack_factory(config)
    status, page = second.get_json("/api/metrics/activity?limit=999&order=asc")
    # Captures are kept in memory only: they did not survive the restart.
    assert all(r["has_capture"] for r in before)
    before = [{**r, "has_capture": False} for r in before]
    assert status == 200 and page["data"] == before
    _post(second, "beta")
    after = _total(second, 5)["data"]
    assert after[:4] == before and after[4]["id"] == before[-1]["id"] + 1

    # The same filters, sorts, pages and errors as from memory.
    status, page = second.get_json("/api/metrics/activity?model=alpha&limit=2&page=2&order=asc")
    assert status == 200
    assert (page["total"], page["total_pages"], page["page"], page["limit"]) == (3, 2, 2, 2)
    assert [r["id"] for r in page["data"]] == [before[3]["id"]]
    ids = [r["id"] for r in after]
    status, page = second.get_json(f"/api/metrics/activity?min_id={ids[1]}&max_id={ids[3]}")
    assert [r["id"] for r in page["data"]] == ids[3:0:-1]
    status, page = second.get_json("/api/metrics/activity?sort=model&order=asc&limit=999")
    assert [r["model"] for r in page["data"]] == ["alpha"] * 3 + ["beta"] * 2
    status, page = second.get_json("/api/metrics/activity?limit=0")
    assert status == 400 and "limit must be between 1 and 999" in json.dumps(page)
    status, stats = second.get_json("/api/metrics/stats?model=beta")
    assert status == 200 and stats["total_requests"] == 2
    assert stats["total_input_tokens"] == 2 and stats["total_output_tokens"] == 6
    assert stats["gen_histogram"] is not None
