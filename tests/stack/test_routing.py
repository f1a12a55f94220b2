"""Routing through the real stack: a `swap: false` group written in llama-swap's current
`routing:` form and in its legacy top-level form serves its members side by side, and under the
matrix router a request for a third model stops exactly the models of the cheapest choice.
The models are tests/support/upstreams/fake_model.py processes (they stand for llama-server)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.daemon import chat
from tests.support.stack import fake_model_cmd, free_port_range

pytestmark = pytest.mark.processes


def _models(start: int, *names: str) -> dict[str, Any]:
    spec = {"proxy": "http://127.0.0.1:${PORT}", "unloadTimeout": 3}
    return {
        "healthCheckTimeout": 15,
        "startPort": start,
        "models": {m: {"cmd": fake_model_cmd(m), **spec} for m in names},
    }


GROUP = {"pair": {"swap": False, "members": ["a", "b"]}}


@pytest.mark.parametrize(
    "routing",
    [{"groups": GROUP}, {"routing": {"router": {"use": "group", "settings": {"groups": GROUP}}}}],
    ids=["legacy", "routing"],
)
def test_a_swap_false_group_serves_its_members_side_by_side(
    stack_factory, routing: dict[str, Any]
) -> None:
    stack = stack_factory({**_models(free_port_range(4), "a", "b"), **routing})
    pid_a = chat(stack.url, "a")["served_by"]["pid"]
    pid_b = chat(stack.url, "b")["served_by"]["pid"]
    assert chat(stack.url, "a")["served_by"]["pid"] == pid_a
    assert (stack.model("a")["state"], stack.model("a")["pid"]) == ("ready", pid_a)
    assert (stack.model("b")["state"], stack.model("b")["pid"]) == ("ready", pid_b)


def test_matrix_third_model_evicts_the_cheapest_set(stack_factory) -> None:
    config = {
        **_models(free_port_range(4), "a", "b", "c"),
        "routing": {
            "router": {
                "use": "matrix",
                "settings": {
                    "matrix": {
                        "vars": {"A": "a"},
                        # a is expensive to stop: c goes beside a, b stops.
                        "evict_costs": {"A": 10},
                        "sets": {"ab": "A & b", "bc": "b & c", "ac": "A & c"},
                    }
                },
            }
        },
    }
    stack = stack_factory(config)
    pid_a = chat(stack.url, "a")["served_by"]["pid"]
    chat(stack.url, "b")
    assert stack.model("a")["pid"] == pid_a  # a & b may run together
    chat(stack.url, "c")
    assert (stack.model("a")["state"], stack.model("a")["pid"]) == ("ready", pid_a)
    assert stack.model("b")["state"] == "stopped"
    assert stack.model("b")["reason"] == "swapped out for c"
    assert stack.model("c")["state"] == "ready"
