"""Sleep and wake through the real stack: circusd, the daemon, the proxy, and the vLLM stand-in
(`tests/support/upstreams/vllm_like.py`, vLLM's sleep endpoints as vLLM documents them; vLLM
needs a GPU, which this machine lacks) on a fake GPU that reports the memory it declares, as NVML
would.

A swap back and forth keeps the sleeping model's process and calls its sleep and wake; a sleep
that answers 500 or never answers, and a wake that fails, fall back to a stop (and a cold start);
a request that comes while a model falls asleep waits and is served; the TTL puts a model to
sleep and `stopAfter` stops it; placement by memory counts what an asleep model still holds; a
streaming request that wakes a model is told so (`sendLoadingState`), and llama-swap's UI sees an
asleep model as stopped."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from swapd.daemon.machinery.gpu_fake import fake_uuid
from tests.support import llama_ui
from tests.support.daemon import chat
from tests.support.sleeping import GIB, MIB, config, events, gpu_env, plain_model, vllm_model
from tests.support.stack import Stack, http_get

pytestmark = pytest.mark.processes

GPU = fake_uuid(0).casefold()


def post(url: str, timeout: float = 60) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def served_pid(reply: dict[str, Any]) -> int:
    return int(reply["served_by"]["pid"])  # type: ignore[index]


def test_a_swap_back_and_forth_keeps_the_process_and_calls_its_sleep_and_wake(
    stack_factory, tmp_path: Path
) -> None:
    log = tmp_path / "vllm.jsonl"
    stack: Stack = stack_factory(
        config(
            {
                "a": vllm_model("a", log, "--gpu-mem", str(8 * GIB), "--residual", str(512 * MIB)),
                "b": plain_model("b"),
            }
        ),
        env=gpu_env(),
    )
    first = served_pid(chat(stack.url, "a"))
    assert served_pid(chat(stack.url, "b")) != first
    a = stack.wait_state("a", "asleep")
    assert a["pid"] == first and a["reason"] == "swapped out for b (asleep)"
    sleep = a["sleep"]
    assert sleep["preset"] == "vllm" and sleep["residual"] == {GPU: 512 * MIB}
    assert sleep["held_before"] == {GPU: 8 * GIB}
    assert sleep["last_sleep_s"] is not None and sleep["sleeps"] == 1
    # What an operator sees of it asleep: `swapd status`, `/running`, `/v1/models` (in llama.cpp's
    # router's word), `/metrics`.
    text = stack.swapd("status").stdout
    assert "a: sleep vllm; asleep, holding 512 MiB on GPU 0" in text
    _, body = http_get(stack.url + "/running")
    running = json.loads(body)
    assert [m["model"] for m in running["asleep"]] == ["a"]
    assert running["asleep"][0]["sleep"]["residual"] == {GPU: 512 * MIB}
    assert [m["model"] for m in running["running"]] == ["b"]
    _, listed = stack.get_json("/v1/models")
    status = {m["id"]: m["status"] for m in listed["data"]}
    assert status["a"]["value"] == "sleeping" and status["a"]["state"] == "asleep"
    _, metrics = http_get(stack.url + "/metrics")
    assert f'swapd_model_asleep_residual_bytes{{gpu="{GPU}",model="a"}} 5.36870912e+08' in (
        metrics.decode()
    )
    # Back to a: woken, the same process; b (no sleep setting) stopped.
    assert served_pid(chat(stack.url, "a")) == first
    assert stack.model("b")["state"] == "stopped"
    a = stack.model("a")
    assert a["state"] == "ready" and a["sleep"]["wakes"] == 1
    assert events(log, "a") == ["start", "loaded", "sleep", "asleep", "wake_up", "awake"]
    metrics = http_get(stack.url + "/metrics")[1].decode()
    assert 'swapd_model_sleeps_total{model="a",result="ok"} 1.0' in metrics
    assert 'swapd_model_wakes_total{model="a",result="ok"} 1.0' in metrics
    # The swap log has the sleep and the wake as records of their own.
    _, swaps = stack.get_json("/api/swaps")
    kinds = [(s["kind"], s["model"]) for s in swaps["swaps"] if s["model"] == "a"]
    assert kinds == [("start", "a"), ("sleep", "a"), ("wake", "a")]


def test_sleep_on_request_the_cli_and_the_api_and_their_refusals(
    stack_factory, tmp_path: Path
) -> None:
    log = tmp_path / "vllm.jsonl"
    stack: Stack = stack_factory(
        config({"a": vllm_model("a", log), "b": plain_model("b")}), env=gpu_env()
    )
    status, body = post(stack.url + "/api/models/sleep/a")
    assert (status, body["error"]["code"]) == (409, "model_not_loaded")
    pid = served_pid(chat(stack.url, "a"))
    result = stack.swapd("sleep", "a")
    assert result.stdout.strip() == "a is asleep"
    assert stack.model("a")["reason"] == "asked to sleep"
    assert served_pid(chat(stack.url, "a")) == pid  # woken by a request
    # llmsnap's path, answered as swapd's.
    status, body = post(stack.url + "/models/sleep/a")
    assert (status, body) == (200, {"msg": "ok", "model": "a", "state": "asleep"})
    chat(stack.url, "b")
    status, body = post(stack.url + "/api/models/sleep/b")
    assert (status, body["error"]["code"]) == (400, "cannot_sleep")
    failed = stack.swapd("sleep", "b", check=False)
    assert failed.returncode == 1 and "has no sleep setting" in failed.stderr


@pytest.mark.parametrize("fault", ["500", "hang"])
def test_a_sleep_that_fails_or_hangs_stops_the_model_instead(
    stack_factory, fault: str, tmp_path: Path
) -> None:
    log = tmp_path / "vllm.jsonl"
    sleep = {"preset": "vllm", "sleepRequestTimeout": 1}
    model = vllm_model("a", log, "--sleep-fault", fault, sleep=sleep)
    stack: Stack = stack_factory(config({"a": model, "b": plain_model("b")}), env=gpu_env())
    chat(stack.url, "a")
    chat(stack.url, "b")
    a = stack.model("a")
    assert a["state"] == "stopped" and a["pid"] is None
    words = "answered 500" if fault == "500" else "did not answer within 1s"
    assert a["reason"].startswith("its sleep failed, so it was stopped: sleep call 1/1 POST")
    assert words in a["reason"] and words in a["sleep"]["last_failure"]
    assert events(log, "a")[-1] == ("sleep_failed" if fault == "500" else "sleep_hangs")
    metrics = http_get(stack.url + "/metrics")[1].decode()
    assert 'swapd_model_stops_total{cause="sleep_failed",model="a"} 1.0' in metrics
    assert 'swapd_model_sleeps_total{model="a",result="failed"} 1.0' in metrics


def test_a_wake_that_fails_stops_the_model_and_starts_it_cold(
    stack_factory, tmp_path: Path
) -> None:
    log = tmp_path / "vllm.jsonl"
    stack: Stack = stack_factory(
        config({"a": vllm_model("a", log, "--wake-fault", "500"), "b": plain_model("b")}),
        env=gpu_env(),
    )
    first = served_pid(chat(stack.url, "a"))
    chat(stack.url, "b")
    stack.wait_state("a", "asleep")
    again = served_pid(chat(stack.url, "a"))
    assert again != first
    assert events(log, "a") == [
        "start", "loaded", "sleep", "asleep", "wake_up", "wake_failed", "start", "loaded",
    ]  # fmt: skip
    a = stack.model("a")
    assert (
        a["state"] == "ready"
        and "wake call 1/1 POST /wake_up answered 500" in (a["sleep"]["last_failure"])
    )
    metrics = http_get(stack.url + "/metrics")[1].decode()
    assert 'swapd_model_stops_total{cause="wake_failed",model="a"} 1.0' in metrics


def test_a_request_while_it_falls_asleep_waits_and_is_served_awake(
    stack_factory, tmp_path: Path
) -> None:
    log = tmp_path / "vllm.jsonl"
    stack: Stack = stack_factory(
        config({"a": vllm_model("a", log, "--sleep-delay", "1.5"), "b": plain_model("b")}),
        env=gpu_env(),
    )
    first = served_pid(chat(stack.url, "a"))
    swapping = threading.Thread(target=chat, args=(stack.url, "b"))
    swapping.start()
    try:
        stack.wait_state("a", "sleeping")
        served = chat(stack.url, "a")  # waits for the sleep, the swap to b, then the wake
    finally:
        swapping.join(60)
    assert served_pid(served) == first
    # Asleep, then woken for the request (b's own request may swap it out again after).
    seen = events(log, "a")
    assert seen[:6] == ["start", "loaded", "sleep", "asleep", "wake_up", "awake"]
    # Never forwarded to it asleep: the stand-in answers that with a 503 it would record.
    assert "request_while_asleep" not in seen


def test_the_ttl_puts_it_to_sleep_and_stop_after_stops_it(stack_factory, tmp_path: Path) -> None:
    log = tmp_path / "vllm.jsonl"
    sleep = {"preset": "vllm", "stopAfter": 2}
    stack: Stack = stack_factory(
        config({"a": vllm_model("a", log, sleep=sleep, ttl=1)}), env=gpu_env()
    )
    pid = served_pid(chat(stack.url, "a"))
    asleep = stack.wait_state("a", "asleep", timeout=20)
    assert asleep["pid"] == pid and asleep["reason"] == "ttl expired (asleep)"
    stopped = stack.wait_state("a", "stopped", timeout=20)
    assert stopped["reason"] == "asleep and unused longer than its sleep.stopAfter"
    assert events(log, "a")[:4] == ["start", "loaded", "sleep", "asleep"]
    assert "wake_up" not in events(log, "a")
    metrics = http_get(stack.url + "/metrics")[1].decode()
    assert 'swapd_model_stops_total{cause="asleep_ttl",model="a"} 1.0' in metrics


@pytest.mark.parametrize(("residual_gib", "kept"), [(1, True), (4, False)])
def test_placement_counts_what_an_asleep_model_still_holds(
    stack_factory, residual_gib: int, kept: bool, tmp_path: Path
) -> None:
    # 16 GiB, less the 0.5 GiB margin: a (10 GiB awake) and b (12 GiB) never fit together;
    # asleep, a holds its residual, which leaves room for b (1 GiB) or not (4 GiB: a is stopped).
    log = tmp_path / "vllm.jsonl"
    residual = str(residual_gib * GIB)
    a = vllm_model("a", log, "--gpu-mem", str(10 * GIB), "--residual", residual, gpus="auto")
    a["vram"] = "10GiB"
    b = vllm_model("b", log, "--gpu-mem", str(12 * GIB), gpus="auto", vram="12GiB")
    del b["sleep"]  # b has none: it is stopped when it must make room
    stack: Stack = stack_factory(config({"a": a, "b": b}), env=gpu_env(16))
    pid = served_pid(chat(stack.url, "a"))
    chat(stack.url, "b")
    after = {m["model"]: m for m in stack.status()["models"]}
    assert after["b"]["state"] == "ready"
    assert events(log, "a")[:4] == ["start", "loaded", "sleep", "asleep"]
    if kept:
        assert after["a"]["state"] == "asleep" and after["a"]["pid"] == pid
        assert after["a"]["sleep"]["residual"] == {GPU: residual_gib * GIB}
    else:
        assert after["a"]["state"] == "stopped" and after["a"]["reason"] == "swapped out for b"


async def test_a_waking_request_streams_waking_and_llama_swaps_ui_sees_its_states(
    stack_factory, tmp_path: Path
) -> None:
    log = tmp_path / "vllm.jsonl"
    stack: Stack = stack_factory(
        config(
            {"a": vllm_model("a", log, "--wake-delay", "0.5"), "b": plain_model("b")},
            sendLoadingState=True,
        ),
        env=gpu_env(),
    )
    chat(stack.url, "a")
    chat(stack.url, "b")
    stack.wait_state("a", "asleep")
    async with (
        aiohttp.ClientSession() as session,
        session.get(stack.url + "/api/events") as events_resp,
    ):
        frames = llama_ui.events(events_resp)
        seen: dict[str, list[tuple[str, str]]] = {"a": []}
        body = {"model": "a", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        async with session.post(stack.url + "/v1/chat/completions", json=body) as resp:
            text = (await resp.read()).decode()
        deadline = asyncio.get_running_loop().time() + 20
        while ("ready", "ready") not in seen["a"][1:]:
            assert asyncio.get_running_loop().time() < deadline, seen
            kind, data = await asyncio.wait_for(anext(frames), 20)
            for m in data if kind == "modelStatus" else []:
                if m["id"] == "a":
                    assert m["sleepMode"] == "enable"
                    pair = (m["state"], m["swapd_state"])
                    if not seen["a"] or seen["a"][-1] != pair:
                        seen["a"].append(pair)
    deltas = [
        json.loads(line[6:])["choices"][0]["delta"]
        for line in text.splitlines()
        if line.startswith("data: {")
    ]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    assert reasoning.startswith("━━━━━\nswapd waking model: a\n"), reasoning
    assert "waking a: its server takes its GPU memory back" in reasoning
    # Then the model's own tokens, in the same response.
    assert "".join(d.get("content") or "" for d in deltas) == "awake and serving"
    # llama-swap's UI: asleep is `stopped`, waking `starting` (swapd's own state beside it).
    assert seen["a"][0] == ("stopped", "asleep")
    assert ("starting", "waking") in seen["a"] and seen["a"][-1] == ("ready", "ready")


def test_a_daemon_restart_adopts_an_asleep_model_asleep(stack_factory, tmp_path: Path) -> None:
    log = tmp_path / "vllm.jsonl"
    stack: Stack = stack_factory(
        config({"a": vllm_model("a", log), "b": plain_model("b")}), env=gpu_env()
    )
    pid = served_pid(chat(stack.url, "a"))
    assert stack.swapd("sleep", "a").returncode == 0
    stack.kill_watcher("swapd-daemon")
    adopted = stack.wait_state("a", "asleep", timeout=30)
    assert adopted["pid"] == pid and adopted["reason"] == "adopted asleep"
    # Its next request wakes it (a ready-adopted asleep server would answer it with a 503).
    assert served_pid(chat(stack.url, "a")) == pid
    assert events(log, "a")[2:] == ["sleep", "asleep", "wake_up", "awake"]


def test_the_sleep_api_answers_a_sleep_that_worked_though_a_request_woke_it_at_once(
    stack_factory, tmp_path: Path
) -> None:
    """A request that comes while the model falls asleep wakes it as soon as it is asleep: the
    sleep worked, and the API says so (200, its state then, `woken`), never `502 did not fall
    asleep and was stopped` (issue 37: 90 of 94 sleeps during chats)."""
    log = tmp_path / "vllm.jsonl"
    stack: Stack = stack_factory(
        config({"a": vllm_model("a", log, "--sleep-delay", "1", "--wake-delay", "1")}),
        env=gpu_env(),
    )
    pid = served_pid(chat(stack.url, "a"))
    answers: list[tuple[int, Any]] = []
    for _ in range(3):
        asking = threading.Thread(
            target=lambda: answers.append(post(stack.url + "/api/models/sleep/a"))
        )
        asking.start()
        try:
            stack.wait_state("a", "sleeping")
            assert served_pid(chat(stack.url, "a")) == pid  # waits for the sleep, then wakes it
        finally:
            asking.join(60)
    assert len(answers) == 3
    for status, body in answers:
        assert status == 200, body
        assert body["msg"] == "ok" and body["model"] == "a"
        assert body["state"] == "asleep" or body == {
            "msg": "ok",
            "model": "a",
            "state": body["state"],
            "woken": True,
        }, body
    seen = events(log, "a")
    assert seen.count("asleep") == 3 and seen.count("awake") == 3, seen
