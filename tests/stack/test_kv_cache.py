"""`kvCache` through the real stack (circusd, the daemon, the proxy) with the llama.cpp stand-in
(`tests/support/upstreams/llamacpp_like.py`: llama-server's slots, prompt cache and `/slots` save
and restore, with cues for what a real server cannot be made to do): a conversation survives a
swap away and back (each slot saved after the drain and restored into the same slot before the
first request, the swap log's `kv_save` and `kv_restore` phases with their bytes, the model page's
facts, `/metrics`); a save that hangs, answers 500 or finds no disk space, and a restore of a
corrupt file, cost nothing but the cache (the stop and the next request go on, with a full
prefill); the budget removes the oldest saves; a changed definition is never restored. The real
server's tier is tests/real/test_kv_cache.py."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.stack import (
    PYTHON,
    UPSTREAMS,
    Stack,
    fake_model_cmd,
    free_port_range,
    http_get,
    wait_for,
)

pytestmark = pytest.mark.processes

LLAMACPP_LIKE = UPSTREAMS / "llamacpp_like.py"
# A conversation long enough that a full prefill and a cache hit are told apart.
OPENING = " ".join(f"word{i}" for i in range(300))
OTHER = "another topic " + " ".join(f"w{i}" for i in range(60))
# What a slot holds after one turn (the stand-in's tokens are words): the role's marker, the
# words, then the answer's marker and its two words.
FIRST, SECOND = 1 + 300 + 3, 1 + 62 + 3


def kv_model(log: Path, *extra: str, kv: Any = "llama.cpp", **fields: Any) -> dict[str, Any]:
    cmd = [PYTHON, str(LLAMACPP_LIKE), "--port", "${PORT}", "--slot-save-path", "${KV_DIR}",
           "--request-log", str(log), *extra]  # fmt: skip
    return {
        "cmd": " ".join(cmd),
        "proxy": "http://127.0.0.1:${PORT}",
        "unloadTimeout": 3,
        "kvCache": kv,
        **fields,
    }


def plain(name: str) -> dict[str, Any]:
    return {"cmd": fake_model_cmd(name), "proxy": "http://127.0.0.1:${PORT}", "unloadTimeout": 3}


def config(tmp_path: Path, models: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "healthCheckTimeout": 30,
        "startPort": free_port_range(len(models)),
        "kvCacheDir": str(tmp_path / "kv"),
        **top,
        "models": models,
    }


def turn(url: str, model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    """One chat turn (a 200); the messages grow by the question's answer."""
    body = json.dumps({"model": model, "messages": messages}).encode()
    request = urllib.request.Request(
        url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        answer: dict[str, Any] = json.loads(response.read())
    messages.append(answer["choices"][0]["message"])
    return answer


def logged(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def restores(log: Path) -> list[int]:
    return [int(e["path"].rsplit("/", 1)[1]) for e in logged(log) if e.get("action") == "restore"]


def metrics(stack: Stack) -> str:
    return http_get(stack.url + "/metrics")[1].decode()


def swaps(stack: Stack, model: str) -> list[dict[str, Any]]:
    _, body = stack.get_json("/api/swaps")
    return [s for s in body["swaps"] if s["model"] == model]


def test_two_conversations_survive_a_swap_away_and_back_each_in_its_slot(
    stack_factory, tmp_path: Path
) -> None:
    log = tmp_path / "a.jsonl"
    stack: Stack = stack_factory(
        config(tmp_path, {"a": kv_model(log, "--slots", "2"), "b": plain("b")})
    )
    first = [{"role": "user", "content": OPENING}]
    second = [{"role": "user", "content": OTHER}]
    assert turn(stack.url, "a", first)["served_by"]["slot"] == 0
    assert turn(stack.url, "a", second)["served_by"]["slot"] == 1
    # Swapped out for b: a's two slots are saved after its drain, before its stop.
    turn(stack.url, "b", [{"role": "user", "content": "hi"}])
    a = stack.wait_state("a", "stopped")
    kv = a["kv"]
    assert kv["preset"] == "llama.cpp" and kv["slots"] == [0, 1] and kv["saves"] == 1
    assert kv["tokens"] == FIRST + SECOND and kv["bytes"] > 0 and kv["saved_at"] > 0
    text = stack.swapd("status").stdout
    assert f"a: kvCache llama.cpp; saved slots 0,1 ({FIRST + SECOND} tokens" in text
    swap = swaps(stack, "b")[-1]
    assert swap["kind"] == "swap" and swap["evicted"] == ["a"]
    assert "kv_save" in swap["phases"] and swap["phase_bytes"]["kv_save"] == kv["bytes"]
    # Back to a: each slot restored into the same slot before the first request went through,
    # and the next turn of each conversation reuses all of it.
    first.append({"role": "user", "content": "and then?"})
    answer = turn(stack.url, "a", first)
    assert sorted(restores(log)) == [0, 1]
    assert answer["served_by"]["slot"] == 0 and answer["timings"]["cache_n"] == FIRST
    second.append({"role": "user", "content": "go on"})
    answer = turn(stack.url, "a", second)
    assert answer["served_by"]["slot"] == 1 and answer["timings"]["cache_n"] == SECOND
    start = swaps(stack, "a")[-1]
    assert start["kind"] == "swap" and "kv_restore" in start["phases"]
    assert start["phase_bytes"]["kv_restore"] == kv["bytes"]
    a = stack.model("a")
    assert a["kv"]["restores"] == 1 and a["kv"]["restored_tokens"] == kv["tokens"]
    # The first request's own count comes with its activity record.
    a = wait_for(lambda: (m := stack.model("a"))["kv"]["first_cache_n"] >= 0 and m)
    assert a["kv"]["first_cache_n"] == FIRST and not a["kv"]["short"]
    text = metrics(stack)
    assert 'swapd_kv_saves_total{model="a",result="ok"} 1.0' in text
    assert 'swapd_kv_restores_total{model="a",result="ok"} 1.0' in text
    assert 'swapd_kv_restores_total{model="a",result="short"}' not in text
    assert f'swapd_kv_bytes_total{{model="a",phase="kv_save"}} {float(kv["bytes"])}' in text


@pytest.mark.parametrize(
    ("cue", "env", "words"),
    [
        (["--hang-save"], {}, "the save took over 1s"),
        (["--save-status", "500"], {}, "answered 500: Unable to save slot"),
        ([], {"SWAPD_KV_RESERVE_BYTES": str(2**62)}, "not enough free disk space"),
    ],
    ids=["hung", "500", "disk-full"],
)
def test_a_save_that_fails_costs_the_cache_only(
    stack_factory, tmp_path: Path, cue: list[str], env: dict[str, str], words: str
) -> None:
    log = tmp_path / "a.jsonl"
    a = kv_model(log, *cue, kv={"preset": "llama.cpp", "timeout": 1})
    stack: Stack = stack_factory(config(tmp_path, {"a": a, "b": plain("b")}), env=env)
    messages = [{"role": "user", "content": OPENING}]
    turn(stack.url, "a", messages)
    turn(stack.url, "b", [{"role": "user", "content": "hi"}])  # the swap goes on
    kv = stack.wait_state("a", "stopped")["kv"]
    assert kv["failures"] == 1 and words in kv["last_failure"] and kv["slots"] == []
    assert 'swapd_kv_saves_total{model="a",result="failed"} 1.0' in metrics(stack)
    messages.append({"role": "user", "content": "and then?"})
    answer = turn(stack.url, "a", messages)
    assert answer["timings"]["cache_n"] == 0  # a full prefill, as without the setting
    assert restores(log) == []


def test_a_corrupt_file_is_a_full_prefill_and_a_200(stack_factory, tmp_path: Path) -> None:
    log = tmp_path / "a.jsonl"
    stack: Stack = stack_factory(config(tmp_path, {"a": kv_model(log), "b": plain("b")}))
    messages = [{"role": "user", "content": OPENING}]
    turn(stack.url, "a", messages)
    turn(stack.url, "b", [{"role": "user", "content": "hi"}])
    stack.wait_state("a", "stopped")
    (file,) = (tmp_path / "kv" / "a").glob("*.bin")
    file.write_bytes(b"\x00garbage")
    messages.append({"role": "user", "content": "and then?"})
    answer = turn(stack.url, "a", messages)
    assert restores(log) == [0] and answer["timings"]["cache_n"] == 0
    kv = stack.model("a")["kv"]
    assert kv["failures"] == 1 and "answered 400" in kv["last_failure"]
    assert 'swapd_kv_restores_total{model="a",result="failed"} 1.0' in metrics(stack)


def test_the_budget_removes_the_oldest_save(stack_factory, tmp_path: Path) -> None:
    pad = str(700 * 1024)  # two saves of 700 KiB do not fit a budget of 1 MB
    models = {
        "a": kv_model(tmp_path / "a.jsonl", "--pad", pad),
        "c": kv_model(tmp_path / "c.jsonl", "--pad", pad),
        "b": plain("b"),
    }
    stack: Stack = stack_factory(config(tmp_path, models, kvCacheBudget=1))
    turn(stack.url, "a", [{"role": "user", "content": OPENING}])
    turn(stack.url, "c", [{"role": "user", "content": OPENING}])
    assert stack.wait_state("a", "stopped")["kv"]["slots"] == [0]
    turn(stack.url, "b", [{"role": "user", "content": "hi"}])
    assert stack.wait_state("c", "stopped")["kv"]["slots"] == [0]
    assert stack.model("a")["kv"]["slots"] == [] and stack.model("a")["kv"]["bytes"] == 0
    assert list((tmp_path / "kv" / "a").glob("*.bin")) == []
    assert len(list((tmp_path / "kv" / "c").glob("*.bin"))) == 1


def test_a_changed_definition_is_not_restored(stack_factory, tmp_path: Path) -> None:
    log = tmp_path / "a.jsonl"
    stack: Stack = stack_factory(config(tmp_path, {"a": kv_model(log), "b": plain("b")}))
    messages = [{"role": "user", "content": OPENING}]
    turn(stack.url, "a", messages)
    turn(stack.url, "b", [{"role": "user", "content": "hi"}])
    assert stack.wait_state("a", "stopped")["kv"]["slots"] == [0]
    # A smaller context: the old files would not fit; they are removed at the reload.
    stack.write_config(config(tmp_path, {"a": kv_model(log, "--ctx", "2048"), "b": plain("b")}))
    stack.swapd("reload")
    assert stack.model("a")["kv"]["slots"] == []
    assert list((tmp_path / "kv" / "a").glob("*.bin")) == []
    messages.append({"role": "user", "content": "and then?"})
    assert turn(stack.url, "a", messages)["timings"]["cache_n"] == 0
    assert restores(log) == []


def test_a_restore_that_brings_back_less_is_short(stack_factory, tmp_path: Path) -> None:
    # A sliding-window model without --swa-full restores only to a checkpoint.
    log = tmp_path / "a.jsonl"
    a = kv_model(log, "--restore-keep", "100")
    stack: Stack = stack_factory(config(tmp_path, {"a": a, "b": plain("b")}))
    messages = [{"role": "user", "content": OPENING}]
    turn(stack.url, "a", messages)
    turn(stack.url, "b", [{"role": "user", "content": "hi"}])
    stack.wait_state("a", "stopped")
    messages.append({"role": "user", "content": "and then?"})
    assert turn(stack.url, "a", messages)["timings"]["cache_n"] == 100
    kv = wait_for(lambda: (m := stack.model("a"))["kv"]["first_cache_n"] >= 0 and m)["kv"]
    assert kv["short"] and kv["restored_tokens"] == 100 and kv["first_cache_n"] == 100
    assert 'swapd_kv_restores_total{model="a",result="short"} 1.0' in metrics(stack)


def test_a_sleep_saves_first_and_a_wake_restores(stack_factory, tmp_path: Path) -> None:
    # A server whose sleep is a call of its own (here one that does nothing): the save comes
    # before it, the restore after the wake's health check.
    log = tmp_path / "a.jsonl"
    sleep = {"sleepEndpoints": ["GET /health"], "wakeEndpoints": []}
    stack: Stack = stack_factory(
        config(tmp_path, {"a": kv_model(log, sleep=sleep), "b": plain("b")})
    )
    messages = [{"role": "user", "content": OPENING}]
    pid = turn(stack.url, "a", messages)["served_by"]["pid"]
    turn(stack.url, "b", [{"role": "user", "content": "hi"}])
    assert stack.wait_state("a", "asleep")["kv"]["slots"] == [0]
    messages.append({"role": "user", "content": "and then?"})
    answer = turn(stack.url, "a", messages)
    assert answer["served_by"]["pid"] == pid and restores(log) == [0]
    wake = swaps(stack, "a")[-1]
    assert wake["kind"] == "wake" and "kv_restore" in wake["phases"]
    sleeping = [s for s in swaps(stack, "a") if s["kind"] == "sleep"][-1]
    assert "kv_save" in sleeping["phases"]


def test_an_unload_saves_and_an_unload_now_does_not(stack_factory, tmp_path: Path) -> None:
    log = tmp_path / "a.jsonl"
    stack: Stack = stack_factory(config(tmp_path, {"a": kv_model(log)}))
    messages = [{"role": "user", "content": OPENING}]
    turn(stack.url, "a", messages)
    stack.swapd("unload", "a")
    assert stack.model("a")["kv"]["saves"] == 1
    messages.append({"role": "user", "content": "and then?"})
    assert turn(stack.url, "a", messages)["timings"]["cache_n"] == FIRST
    stack.swapd("unload", "a", "--now")  # a quick stop: the save before it is skipped
    kv = stack.model("a")["kv"]
    assert kv["saves"] == 1 and kv["tokens"] == FIRST
    saves = [e for e in logged(log) if e.get("action") == "save"]
    assert len(saves) == 1
