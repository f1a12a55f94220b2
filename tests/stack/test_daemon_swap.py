"""Swapping, through the real stack: circusd, daemon, proxy and two fake_model upstreams."""

from __future__ import annotations

import pytest

from tests.support.daemon import chat
from tests.support.stack import fake_model_cmd, free_port_range

pytestmark = pytest.mark.processes


def _two_models(**extra: object) -> dict[str, object]:
    start = free_port_range(2)
    model = {"proxy": "http://127.0.0.1:${PORT}", "unloadTimeout": 3, **extra}
    return {
        "healthCheckTimeout": 15,
        "startPort": start,
        "models": {
            "alpha": {"cmd": fake_model_cmd("alpha"), **model},
            "beta/v1:2.5": {"cmd": fake_model_cmd("beta"), **model},
        },
    }


def test_swap_between_two_models(stack_factory) -> None:
    stack = stack_factory(_two_models())
    first = chat(stack.url, "alpha")
    assert first["served_by"]["name"] == "alpha"
    alpha_pid = stack.model("alpha")["pid"]
    assert alpha_pid == first["served_by"]["pid"]

    second = chat(stack.url, "beta/v1:2.5")
    assert second["served_by"]["name"] == "beta"
    status = {m["model"]: m for m in stack.status()["models"]}
    assert status["alpha"]["state"] == "stopped"
    assert status["alpha"]["reason"] == "swapped out for beta/v1:2.5"
    assert status["beta/v1:2.5"]["state"] == "ready"
    listed = stack.circusctl("list")
    assert "model-beta_2fv1_3a2_2e5" in listed and "model-alpha" not in listed

    third = chat(stack.url, "alpha")
    assert third["served_by"]["name"] == "alpha"
    assert third["served_by"]["pid"] != alpha_pid
