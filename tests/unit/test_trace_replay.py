"""benchmarks/trace_replay.py's parts that need no process: the committed traces are the ones
their seeded script writes and name only models it knows, and a wasted start is told from the
swap log as the benchmark defines it (a model brought in for a request and taken out before it
answered one)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.harness.before_tree import REPO, package_dirs
from benchmarks.harness.replayer import Answer, brought_in, wasted_starts
from benchmarks.harness.trace_files import (
    Kind,
    Request,
    Server,
    merged,
    read_models,
    read_trace,
    swapd_config,
    trace_names,
    trace_path,
    warm,
    warm_env,
)
from benchmarks.traces.make_traces import TRACES, render


@pytest.mark.parametrize("name", sorted(TRACES))
def test_the_committed_trace_is_what_its_seeded_script_writes(name: str) -> None:
    assert trace_path(name).read_text() == render(name), (
        f"benchmarks/traces/{name}.jsonl differs from make_traces.py's: run the script, commit"
    )


def test_every_trace_names_known_models_and_waits_only_on_a_previous_line() -> None:
    models = read_models()
    assert trace_names() == sorted(TRACES)
    for name in trace_names():
        trace = read_trace(name)
        assert trace, name
        clients_seen: set[str] = set()
        for request in trace:
            assert request.model in models, (name, request)
            if request.kind is Kind.COMFYUI:
                assert request.model == "comfyui_auto", (name, request)
            if models[request.model].server is Server.VLLM:
                assert request.gen == 0, (name, request)  # its stand-in takes no time
            if request.after:
                assert request.client in clients_seen, (name, request)
            clients_seen.add(request.client)
        config = swapd_config(trace, models, 0.5, 40000)
        assert set(config["models"]) == {r.model for r in trace}


def test_new_config_is_merged_under_models_key_by_key() -> None:
    base = {"startPort": 1, "models": {"a": {"cmd": "x", "gpus": [0]}}}
    extra = {"maxWait": 4, "models": {"a": {"maxWait": 2}}}
    assert merged(base, extra) == {
        "startPort": 1,
        "maxWait": 4,
        "models": {"a": {"cmd": "x", "gpus": [0], "maxWait": 2}},
    }


def test_the_warm_tree_puts_the_llama_models_to_sleep_through_cuda_and_times_their_copies(
    tmp_path,
) -> None:
    models = read_models()
    config = swapd_config(read_trace("e_day"), models, 0.5, 40000)
    warmed = warm(config, models)
    servers = {name: models[name].server for name in config["models"]}
    assert Server.LLAMA in servers.values() and Server.VLLM in servers.values()
    for name, server in servers.items():
        if server is Server.LLAMA:
            assert warmed["models"][name] == config["models"][name] | {"sleep": "cuda"}
        else:
            assert warmed["models"][name] == config["models"][name]
    env = warm_env(str(tmp_path), 0.5)
    assert env["SWAPD_FAKE_CUDA_GBPS"] == "40"  # twice the rate at half the time
    assert "MemAvailable:" in (tmp_path / "meminfo").read_text()


def test_the_before_tree_maps_the_folders_the_editable_install_maps() -> None:
    assert package_dirs(REPO / "pyproject.toml") == {
        "daemon": "daemon",
        "proxy": "proxy",
        "ipc": "ipc",
    }


def record(id: int, kind: str, model: str, began: float, ended: float, **more: Any) -> Any:
    return (
        {"id": id, "kind": kind, "model": model, "began": began, "ended": ended}
        | {
            "cause": "request" if kind in ("start", "swap", "wake") else "swap",
            "result": "ok",
        }
        | more
    )


def answered(model: str, at: float, index: int = 0) -> Answer:
    request = Request(index=index, at=0.0, client="c", model=model, kind=Kind.STREAM)
    return Answer(request, sent=at - 1.0, first_byte=at, done=at + 1.0, status=200)


def test_a_start_taken_out_before_it_served_is_wasted_and_the_one_that_served_is_not() -> None:
    """The issue's case: b started, swapped out in the same millisecond, started again."""
    swaps = {
        1: record(1, "start", "a", 0.0, 1.0),
        2: record(2, "stop", "a", 1.5, 1.6),
        3: record(3, "swap", "b", 1.5, 3.0, evicted=["a"]),
        4: record(4, "stop", "b", 3.001, 3.05),
        5: record(5, "swap", "a", 3.001, 4.0),
        6: record(6, "stop", "a", 4.5, 4.6),
        7: record(7, "swap", "b", 4.5, 6.0),
    }
    answers = [answered("a", 1.2), answered("a", 4.1), answered("b", 6.1)]
    assert [r["id"] for r in wasted_starts(swaps, answers)] == [3]
    assert brought_in(swaps) == 4


def test_an_aborted_start_is_wasted_a_failed_one_or_a_load_is_not() -> None:
    swaps = {
        1: record(1, "start", "a", 0.0, 1.0, result="aborted"),
        2: record(2, "start", "b", 1.0, 2.0, result="failed"),
        3: record(3, "start", "c", 2.0, 3.0, cause="load"),
        4: record(4, "stop", "c", 3.1, 3.2),
    }
    assert [r["id"] for r in wasted_starts(swaps, [])] == [1]


def test_a_wait_leaves_out_the_models_own_generation() -> None:
    request = Request(index=0, at=0.0, client="c", model="m", kind=Kind.CHAT, gen=2.0)
    answer = Answer(request, sent=10.0, first_byte=13.5, own=2.0)
    assert answer.wait == pytest.approx(1.5)
