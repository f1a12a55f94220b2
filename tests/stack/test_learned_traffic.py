"""The traffic learned, against the real stack (issue 37 item 6): after A -> B -> A -> B the
daemon's status (`/api/status`, what the model page reads) shows B following A, B's weight file
(`weights`) is read ahead when A is asked for again and its page-cache figure is in B's status;
with `learn.enabled: false` nothing is learned or read ahead."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import chat
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.processes


def _config(weights: Path, **top: Any) -> dict[str, Any]:
    a, b = model_ports(2)
    return {
        "healthCheckTimeout": 15,
        "models": {
            "a": local_model("a", a),
            "b": local_model("b", b, weights=[str(weights)]),
        },
        **top,
    }


def _weights(tmp_path: Path) -> Path:
    path = tmp_path / "b.gguf"
    with open(path, "wb") as f:
        f.write(os.urandom(1024 * 1024))
        f.flush()
        os.fsync(f.fileno())
    return path


def _api_model(stack: Stack, model_id: str) -> dict[str, Any]:
    status, body = stack.get_json("/api/status")
    assert status == 200
    return next(m for m in body["models"] if m["model"] == model_id)


def _ping_pong(stack: Stack) -> None:
    for name in "abab":
        chat(stack.url, name)
        stack.wait_state(name, "ready")


def test_b_is_learned_to_follow_a_and_read_ahead(tmp_path: Path) -> None:
    weights = _weights(tmp_path)
    with Stack(_config(weights)) as stack:
        _ping_pong(stack)
        learned = wait_for(
            lambda: (m := _api_model(stack, "a")["learned"])["likely_next"] and m,
            15,
            what="a's likely next model learned",
        )
        assert learned["followers"][0]["model"] == "b"
        assert learned["followers"][0]["count"] >= 1.5
        assert learned["likely_next"] == "b"
        # b's weight file is measured in the page cache (what the model page shows).
        cache = wait_for(lambda: _api_model(stack, "b")["page_cache"], 20, what="b's page cache")
        assert (cache["files"], cache["size"]) == (1, 1024 * 1024)
        assert 0.0 <= cache["fraction"] <= 1.0
        assert _api_model(stack, "a")["page_cache"] is None  # a names no weight file
        # a asked for again with b stopped: b's file is read ahead while a runs.
        chat(stack.url, "a")
        ahead = wait_for(
            lambda: (m := _api_model(stack, "b")["learned"])["prefetched_bytes"] and m,
            15,
            what="b read ahead",
        )
        assert ahead["prefetched_bytes"] == 1024 * 1024 and ahead["prefetched_at"] > 0
        assert stack.model("b")["state"] == "stopped"


def test_with_learning_off_nothing_is_learned_or_read_ahead(tmp_path: Path) -> None:
    weights = _weights(tmp_path)
    with Stack(_config(weights, learn={"enabled": False})) as stack:
        _ping_pong(stack)
        chat(stack.url, "a")
        # The records are in the activity log (the learning's input), and still nothing learned.
        wait_for(
            lambda: stack.get_json("/api/metrics/activity")[1]["total"] >= 5,
            15,
            what="the activity recorded",
        )
        for model_id in ("a", "b"):
            assert _api_model(stack, model_id)["learned"] is None
        assert "read ahead" not in stack.output()
