"""The next turn of a long conversation after a swap away and back: with `kvCache`, without it,
and without any swap, side by side on llama.cpp's real server code.

Three swapd run at once, each with the same llama.cpp model (tests/support/upstreams/
llama_server.py: the `xllamacpp` wheel's `llama-server`, Gemma 3 270M Q4_K_M, `--threads 1`,
`--swa-full`, one slot) holding the same conversation of about `--tokens` tokens, and a second
model (the fake llama-server) to swap to:

* **kv**: the model has `kvCache: llama.cpp` (`--slot-save-path ${KV_DIR}`): the swap away saves
  its slot, the swap back restores it before the first request goes through;
* **cold**: the same model without the setting: the swap back prefills the whole conversation;
* **warm**: never swapped: the next turn hits llama.cpp's own prompt cache.

Each round, in rotating order: kv and cold swap to the other model and back (`POST
/api/models/load/<id>`, timed: the swap back, restore included), then each of the three sends the
next turn (a new question on the whole conversation, `max_tokens: 1`), timed from the request to
its answer: the time to the first token. The swap log gives the save's and the restore's seconds
and bytes.

Targets (benchmarks/targets.py): the kv turn against 1.5x the warm one (+ 100 ms); how many times
faster than the cold one it is; the save and the restore together.

Needs the llama.cpp part (tests/support/realparts/provision.py: xllamacpp and the Gemma GGUF; a
`pip install` of them, as docs/testing.md says); exit status 2 without it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.paths import UPSTREAMS
from tests.support.ports import free_port_range
from tests.support.realparts.provision import LlamaCpp, PartMissing, ensure_llamacpp

from .harness.report import Report
from .harness.swapd_run import RunningSwapd

LLAMA_SERVER = UPSTREAMS / "llama_server.py"
FAKE_MODEL = UPSTREAMS / "fake_model.py"
WAYS = ("kv", "cold", "warm")


def conversation(tokens: int) -> str:
    """About `tokens` of Gemma's tokens (a note is about 14 of them)."""
    return "Here are my notes. " + " ".join(
        f"Note {i}: the {('red', 'blue', 'green')[i % 3]} box holds {i * 3} marbles."
        for i in range(max(1, tokens // 14))
    )


def swapd_config(llm: LlamaCpp, kv_dir: Path | None, ctx: int) -> str:
    chat = (
        f"{sys.executable} {LLAMA_SERVER} --model {llm.gguf} --port ${{PORT}} --threads 1 "
        f"--ctx {ctx} --slots 1 --alias chat --swa-full"
    )
    model: dict[str, Any] = {"cmd": chat, "env": [f"PYTHONPATH={llm.pythonpath}"]}
    top: dict[str, Any] = {}
    if kv_dir is not None:
        model["cmd"] += " --slot-save-path ${KV_DIR}"
        model["kvCache"] = "llama.cpp"
        top["kvCacheDir"] = str(kv_dir)
    other = {"cmd": f"{sys.executable} {FAKE_MODEL} --port ${{PORT}} --name other"}
    return json.dumps(
        {
            "healthCheckTimeout": 300,
            "startPort": free_port_range(2),
            **top,
            "models": {"chat": model, "other": other},
        }
    )


def post(url: str, body: dict[str, Any] | None = None, timeout: float = 900) -> Any:
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


class Chat:
    """One swapd's conversation."""

    def __init__(self, swapd: RunningSwapd, opening: str) -> None:
        self.swapd = swapd
        self.messages = [{"role": "user", "content": opening}]

    def turn(self, question: str) -> tuple[float, dict[str, Any]]:
        """The next turn, timed from the request to its one-token answer."""
        self.messages.append({"role": "user", "content": question})
        body = {"model": "chat", "messages": self.messages, "max_tokens": 1}
        began = time.perf_counter()
        answer = post(self.swapd.url + "/v1/chat/completions", body)
        took = time.perf_counter() - began
        self.messages.append(
            {"role": "assistant", "content": answer["choices"][0]["message"]["content"]}
        )
        return took, answer["timings"]

    def swap_back(self) -> float:
        """Swap to the other model, then back to this one: the swap back's seconds."""
        post(self.swapd.url + "/api/models/load/other")
        began = time.perf_counter()
        post(self.swapd.url + "/api/models/load/chat")
        return time.perf_counter() - began


def phases(swapd: RunningSwapd) -> tuple[list[float], list[float], list[int]]:
    """The kv_save and kv_restore seconds of each swap, and the bytes each restore read."""
    with urllib.request.urlopen(swapd.url + "/api/swaps", timeout=30) as response:
        records = json.loads(response.read())["swaps"]
    saves = [r["phases"]["kv_save"] for r in records if "kv_save" in r["phases"]]
    chat = [r for r in records if r["model"] == "chat" and "kv_restore" in r["phases"]]
    return (
        saves,
        [r["phases"]["kv_restore"] for r in chat],
        [r.get("phase_bytes", {}).get("kv_restore", 0) for r in chat],
    )


def main(argv: list[str] | None, report: Report) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks kv_swap", description=__doc__)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=2800, help="the conversation's length")
    parser.add_argument("--ctx", type=int, default=4096)
    args = parser.parse_args(argv)
    try:
        llm = ensure_llamacpp("use")
    except PartMissing as exc:
        print(f"kv_swap needs the llama.cpp part: {exc}")
        return 2
    opening = conversation(args.tokens)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    backs: dict[str, list[float]] = {"kv": [], "cold": []}
    with tempfile.TemporaryDirectory(prefix="swapd-bench-kv-") as kv_dir:
        configs = {
            "kv": swapd_config(llm, Path(kv_dir), args.ctx),
            "cold": swapd_config(llm, None, args.ctx),
            "warm": swapd_config(llm, None, args.ctx),
        }
        stacks = {way: RunningSwapd(text, start_timeout=60) for way, text in configs.items()}
        try:
            for swapd in stacks.values():
                swapd.__enter__()
            chats = {way: Chat(stacks[way], opening) for way in WAYS}
            held = 0
            for way in WAYS:  # the conversation's first turn: a full prefill everywhere
                _, timings = chats[way].turn("Summarise the notes.")
                held = timings["prompt_n"] + timings["cache_n"]
            print(f"a conversation of {held} tokens; {args.rounds} rounds; --threads 1")
            for i in range(args.rounds):
                order = WAYS[i % 3 :] + WAYS[: i % 3]
                for way in order:
                    if way != "warm":
                        backs[way].append(chats[way].swap_back())
                    took, timings = chats[way].turn(f"Question {i}: how many marbles in all?")
                    times[way].append(took)
                    print(
                        f"  round {i} {way:5s} first token {took * 1e3:9.1f} ms "
                        f"(cache_n {timings['cache_n']}, prompt_n {timings['prompt_n']})"
                    )
            saves, restores, read = phases(stacks["kv"])
        finally:
            for swapd in stacks.values():
                swapd.stop()
    med = {way: statistics.median(values) for way, values in times.items()}
    back = {way: statistics.median(values) for way, values in backs.items()}
    kv_cost = statistics.median(saves) + statistics.median(restores) if restores else float("nan")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {load} on {os.cpu_count()} CPUs")
    print("the next turn's first token (median):")
    for way, label in (
        ("kv", "swapped away and back, kvCache"),
        ("cold", "swapped away and back, without"),
        ("warm", "never swapped"),
    ):
        extra = f"; the swap back itself {back[way] * 1e3:.0f} ms" if way in back else ""
        print(f"  {label:32s} {med[way] * 1e3:9.1f} ms{extra}")
    mib = statistics.median(read) / 2**20 if read else 0.0
    print(
        f"save {statistics.median(saves) * 1e3:.1f} ms, restore "
        f"{statistics.median(restores) * 1e3:.1f} ms, {mib:.1f} MiB a slot (the swap log's)"
        if restores
        else "no restore recorded"
    )
    report.figure("first_token_ms", {way: [t * 1e3 for t in ts] for way, ts in times.items()})
    report.figure("swap_back_ms", {way: [t * 1e3 for t in ts] for way, ts in backs.items()})
    report.figure("kv_phases_ms", {"save": saves, "restore": restores, "bytes": read})
    report.check("vs_warm", (med["kv"] - 1.5 * med["warm"]) * 1e3)
    report.check("vs_cold", med["cold"] / med["kv"])
    report.check("kv_phases", kv_cost * 1e3)
    return 0
