"""Verified wakes through the real stack (docs/guides/sleep-and-wake.md, "Verified wakes"): the
vLLM stand-in answers with garbage after a wake on cue (`--wrong-after-wake`, as a vLLM woken
with corrupted weights did while `/health` said all was well), and the model's `wakeProbe`
catches it: the client gets the right answer from a cold start, the metrics and the swap records
name the cause. A wake that answers as before passes and its probe's cost is recorded; with
`wakeProbe: off` nothing is asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import chat
from tests.support.sleeping import config, events, gpu_env, plain_model, vllm_model
from tests.support.stack import Stack, http_get, wait_for

pytestmark = pytest.mark.processes

RIGHT = "awake and serving"


def answer(reply: dict[str, Any]) -> tuple[str, int]:
    return reply["choices"][0]["message"]["content"], int(reply["served_by"]["pid"])


def records(stack: Stack, model: str) -> list[dict[str, Any]]:
    _, swaps = stack.get_json("/api/swaps")
    return [s for s in swaps["swaps"] if s["model"] == model]


def test_a_wake_that_answers_wrongly_is_not_served_the_model_starts_cold(
    stack_factory, tmp_path: Path
) -> None:
    log = tmp_path / "vllm.jsonl"
    stack: Stack = stack_factory(
        config({"a": vllm_model("a", log, "--wrong-after-wake"), "b": plain_model("b")}),
        env=gpu_env(),
    )
    text, first = answer(chat(stack.url, "a"))
    assert text == RIGHT
    chat(stack.url, "b")
    stack.wait_state("a", "asleep")
    # Back to a: its wake answers /health, then garbage; the client gets a cold start's answer.
    text, again = answer(chat(stack.url, "a"))
    assert (text, again != first) == (RIGHT, True)
    assert events(log, "a") == [
        "start", "loaded", "sleep", "asleep", "wake_up", "awake", "wrong_answer", "start", "loaded",
    ]  # fmt: skip
    a = stack.model("a")
    assert a["state"] == "ready"
    assert "its wakeProbe mismatch" in a["sleep"]["last_failure"]
    metrics = http_get(stack.url + "/metrics")[1].decode()
    assert 'swapd_model_wakes_total{model="a",result="unverified"} 1.0' in metrics
    assert 'swapd_model_stops_total{cause="wake_unverified",model="a"} 1.0' in metrics
    assert 'swapd_swap_phase_seconds_count{model="a",phase="verify"} 2.0' in metrics
    # The swap log: the wake failed with its cause, the stop that followed names it.
    found = wait_for(lambda: [r for r in records(stack, "a") if r["kind"] == "stop"], 10)
    wake = next(r for r in records(stack, "a") if r["kind"] == "wake")
    assert wake["result"] == "failed" and "wake was not verified" in wake["reason"]
    assert "verify" in wake["phases"]
    assert found[-1]["cause"] == "wake_unverified"
    assert "wake not verified, its wakeProbe mismatch" in stack.output()


def test_a_wake_that_answers_as_before_passes_and_records_the_probes_cost(
    stack_factory, tmp_path: Path
) -> None:
    log = tmp_path / "vllm.jsonl"
    stack: Stack = stack_factory(
        config({"a": vllm_model("a", log), "b": plain_model("b")}), env=gpu_env()
    )
    _, first = answer(chat(stack.url, "a"))
    chat(stack.url, "b")
    stack.wait_state("a", "asleep")
    assert answer(chat(stack.url, "a")) == (RIGHT, first)
    a = stack.model("a")
    assert (a["sleep"]["wakes"], a["sleep"]["verified"], a["sleep"]["last_failure"]) == (1, 1, "")
    metrics = http_get(stack.url + "/metrics")[1].decode()
    assert 'swapd_model_wakes_total{model="a",result="ok"} 1.0' in metrics
    # Asked twice: before its first sleep (recording the answer) and after the wake.
    assert 'swapd_swap_phase_seconds_count{model="a",phase="verify"} 2.0' in metrics
    wake = wait_for(lambda: [r for r in records(stack, "a") if r["kind"] == "wake"], 10)[0]
    assert wake["result"] == "ok" and wake["phases"]["verify"] >= 0


def test_wake_probe_off_asks_nothing(stack_factory, tmp_path: Path) -> None:
    log = tmp_path / "vllm.jsonl"
    stack: Stack = stack_factory(
        config(
            {
                "a": vllm_model("a", log, "--wrong-after-wake", wakeProbe="off"),
                "b": plain_model("b"),
            }
        ),
        env=gpu_env(),
    )
    _, first = answer(chat(stack.url, "a"))
    chat(stack.url, "b")
    stack.wait_state("a", "asleep")
    # Not verified: the same process serves, garbage and all; no probe was sent.
    text, again = answer(chat(stack.url, "a"))
    assert again == first and text != RIGHT
    assert events(log, "a").count("wrong_answer") == 1  # the client's request, no probe's
    assert stack.model("a")["sleep"]["verified"] == 0
    metrics = http_get(stack.url + "/metrics")[1].decode()
    assert 'phase="verify"' not in metrics
    wake = next(r for r in records(stack, "a") if r["kind"] == "wake")
    assert "verify" not in wake["phases"]


def test_a_written_out_probe_with_its_expected_answer(stack_factory, tmp_path: Path) -> None:
    log = tmp_path / "vllm.jsonl"
    probe = {
        "path": "/v1/chat/completions",
        "body": json.dumps({"model": "a", "messages": [{"role": "user", "content": "x"}]}),
        "jsonPath": "choices.0.message.content",
        "expect": RIGHT,
    }
    stack: Stack = stack_factory(
        config(
            {
                "a": vllm_model("a", log, "--wrong-after-wake", wakeProbe=probe),
                "b": plain_model("b"),
            }
        ),
        env=gpu_env(),
    )
    _, first = answer(chat(stack.url, "a"))
    chat(stack.url, "b")
    stack.wait_state("a", "asleep")
    text, again = answer(chat(stack.url, "a"))
    assert (text, again != first) == (RIGHT, True)
    assert "expected 'awake and serving'" in stack.model("a")["sleep"]["last_failure"]
