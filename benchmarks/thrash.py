"""What one thrashing client costs two people chatting (issue 37, item 3; docs/swapping.md, "No
one client thrashes the GPU for everyone").

One swapd, three models that evict each other (one at a time), each the test suite's stand-in
for llama-server (tests/support/upstreams/fake_model.py) with a start of `--start` seconds (its
/health answers 503 that long). Two clients chat with `a`, each sending its next request as soon
as the last was answered. In alternating rounds of `--seconds` each:

* **quiet**: only the two chatting;
* **thrash**: the same, while a third client asks for `b` and `c` alternately every `--every`
  seconds with `POST /api/models/load/<m>?wait=false` (fire and forget; `--way abandon`: a chat
  it abandons after 50 ms instead); or, `--way keepalive0`, asks through Ollama's API that `a`
  itself be unloaded: alternately an empty `/api/generate` with `keep_alive: 0` (unload now) and
  an `/api/chat` with `keep_alive: 0` (unload once answered), each waited for.

Each round begins with `a` loaded and nothing queued. `--before DIR` measures an older tree
beside this one in the same rounds (`DIR/swapd/...` first on `PYTHONPATH`; make one with
`mkdir -p DIR/swapd && git archive REV | tar -x -C DIR/swapd`). Figures: the chatting clients'
p50 and p95 latency in each way, their requests per second, and the swaps (starts of `b` or `c`;
with `--way keepalive0`, stops of `a`) the thrashing client caused while they chatted (the swap
log's records that began in the round).

Targets (benchmarks/targets.py): the chatting clients' p50 with the thrashing client over their
p50 without it, and the swaps it caused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.paths import UPSTREAMS
from tests.support.ports import free_port_range

from .harness.report import Report
from .harness.swapd_run import RunningSwapd

FAKE_MODEL = UPSTREAMS / "fake_model.py"
MODELS = ("a", "b", "c")


def config_text(start: float) -> str:
    models = {}
    for name in MODELS:
        argv = [sys.executable, str(FAKE_MODEL), "--port", "${PORT}", "--name", name]
        if start:
            argv += ["--health-delay", f"{start:g}"]
        models[name] = {
            "cmd": shlex.join(argv),
            "proxy": "http://127.0.0.1:${PORT}",
            "unloadTimeout": 5,
        }
    return json.dumps(
        {"healthCheckTimeout": 60, "startPort": free_port_range(len(MODELS)), "models": models}
    )


async def chat(session: aiohttp.ClientSession, base: str, model: str) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    async with session.post(f"{base}/v1/chat/completions", json=body) as resp:
        text = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{model}: HTTP {resp.status}: {text[:300]!r}")


async def victim(
    session: aiohttp.ClientSession, base: str, until: float, times: list[float]
) -> None:
    while time.monotonic() < until:
        began = time.perf_counter()
        await chat(session, base, "a")
        times.append(time.perf_counter() - began)


async def thrasher(
    session: aiohttp.ClientSession, base: str, until: float, every: float, way: str
) -> int:
    sent = 0
    while time.monotonic() < until:
        model = MODELS[1 + sent % 2]
        if way == "load":
            async with session.post(f"{base}/api/models/load/{model}?wait=false") as resp:
                await resp.read()
                if resp.status not in (200, 202):
                    raise RuntimeError(f"load {model}: HTTP {resp.status}")
        elif way == "keepalive0":
            await keep_alive_0(session, base, "a", unload=sent % 2 == 0)
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.05):
                    await chat(session, base, model)
        sent += 1
        await asyncio.sleep(every)  # the thrashing client's own pace
    return sent


async def keep_alive_0(
    session: aiohttp.ClientSession, base: str, model: str, *, unload: bool
) -> None:
    """Ollama's `keep_alive: 0` for `model`: an empty generate (unload it now), or a chat (unload
    it once answered)."""
    if unload:
        path, body = "/api/generate", {"model": model, "keep_alive": 0}
    else:
        message = {"role": "user", "content": "hi"}
        path = "/api/chat"
        body = {"model": model, "messages": [message], "stream": False, "keep_alive": 0}
    async with session.post(f"{base}{path}", json=body) as resp:
        text = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"keep_alive 0 for {model}: HTTP {resp.status}: {text[:300]!r}")


async def status(session: aiohttp.ClientSession, base: str) -> list[dict[str, Any]]:
    async with session.get(f"{base}/api/status") as resp:
        models: list[dict[str, Any]] = (await resp.json())["models"]
        return models


async def settle(session: aiohttp.ClientSession, base: str) -> None:
    """Until no swap waits or runs (the thrasher's loads went once `a` was idle), then `a` alone
    loaded: each round begins the same."""
    await quiet(session, base)
    async with session.post(f"{base}/api/models/unload") as resp:
        await resp.read()
    await chat(session, base, "a")


async def quiet(session: aiohttp.ClientSession, base: str) -> None:
    """Until no swap waits or runs, and every record has ended."""
    deadline = time.monotonic() + 120
    while True:
        models = await status(session, base)
        quiet = all(m["waiting"] is None for m in models) and not any(
            m["state"] in ("starting", "draining", "stopping", "waking", "sleeping") for m in models
        )
        if quiet:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("swapd did not settle after a round")
        await asyncio.sleep(0.1)


async def swaps_to(
    session: aiohttp.ClientSession, base: str, since: float, before: float, way: str
) -> int:
    """Starts of b or c (`keepalive0`: stops of a) that began from `since` to `before` (wall
    clock)."""
    async with session.get(f"{base}/api/swaps") as resp:
        records = (await resp.json())["swaps"]
    if way == "keepalive0":
        models, kinds = MODELS[:1], ("stop", "sleep")
    else:
        models, kinds = MODELS[1:], ("start", "swap")
    caused = [
        r
        for r in records
        if r["model"] in models and r["kind"] in kinds and since <= r["began"] < before
    ]
    for r in caused:
        print(
            f"  {r['kind']} of {r['model']} at +{r['began'] - since:.2f} s, cause {r['cause']}, "
            f"waited {r['waited']:.2f} s for {list(r['waited_for'])}"
        )
    return len(caused)


async def round_of(
    session: aiohttp.ClientSession, base: str, args: argparse.Namespace, way: str
) -> tuple[list[float], int, int]:
    await settle(session, base)
    times: list[float] = []
    began = time.time()
    until = time.monotonic() + args.seconds
    jobs = [victim(session, base, until, times) for _ in range(2)]
    sent = 0
    if way == "thrash":
        thrashing = thrasher(session, base, until, args.every, args.way)
        *_, sent = await asyncio.gather(*jobs, thrashing)
    else:
        await asyncio.gather(*jobs)
    ended = time.time()
    await quiet(session, base)  # a start that began in the round has its record once it ended
    caused = await swaps_to(session, base, began, ended, args.way)
    return times, sent, caused


def main(argv: list[str], report: Report) -> int:
    return asyncio.run(measure(argv, report))


async def measure(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks thrash", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each way (default 3)")
    parser.add_argument("--seconds", type=float, default=8.0, help="a round's length (default 8)")
    parser.add_argument("--every", type=float, default=0.1, help="the thrasher's pace (0.1 s)")
    parser.add_argument("--start", type=float, default=0.5, help="a model's start (0.5 s)")
    parser.add_argument(
        "--way",
        choices=("load", "abandon", "keepalive0"),
        default="load",
        help="how the thrasher asks",
    )
    parser.add_argument("--before", type=Path, help="an older tree to measure in the same rounds")
    args = parser.parse_args(argv)

    trees = ["swapd"] if args.before is None else ["swapd", "before"]
    figures = {tree: Figures() for tree in trees}
    with contextlib.ExitStack() as running:
        stacks = {"swapd": running.enter_context(RunningSwapd(config_text(args.start)))}
        if args.before is not None:
            env = {**os.environ, "PYTHONPATH": str(args.before.resolve())}
            before = RunningSwapd(config_text(args.start), env=env, start_timeout=60)
            stacks["before"] = running.enter_context(before)
        for tree, swapd in stacks.items():
            print(f"{tree}: {swapd.url} (run dir {swapd.run_dir})")
        async with aiohttp.ClientSession() as session:
            for n in range(args.rounds):
                for tree, swapd in stacks.items():
                    for way in ("quiet", "thrash") if n % 2 == 0 else ("thrash", "quiet"):
                        got, sent, swaps = await round_of(session, swapd.url, args, way)
                        figures[tree].add(way, got, sent, swaps, args.seconds)
                        print(
                            f"round {n + 1} {tree:6s} {way:6s}: {len(got)} chats, p50 "
                            f"{statistics.median(got) * 1e3:.2f} ms, swaps caused {swaps}"
                            + (f", {sent} asked" if way == "thrash" else "")
                        )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average {load} on {os.cpu_count()} CPUs; the thrasher's way: {args.way}")
    for tree in trees:
        f = figures[tree]
        for way in ("quiet", "thrash"):
            print(
                f"{tree:6s} {way:6s}: p50 {f.p50(way) * 1e3:.2f} ms, "
                f"p95 {f.p95(way) * 1e3:.2f} ms, max {max(f.times[way]) * 1e3:.0f} ms, "
                f"{f.rate(way):.0f} chats/s"
            )
        print(f"{tree:6s} the thrashing client asked {f.asked} times and caused {f.swaps} swaps")
        report.figure(f"{tree}_p50_ms", {w: [x * 1e3 for x in v] for w, v in f.p50s.items()})
        report.figure(f"{tree}_p95_ms", {w: f.p95(w) * 1e3 for w in f.times})
        report.figure(f"{tree}_max_ms", {w: max(v) * 1e3 for w, v in f.times.items()})
        report.figure(f"{tree}_chats_per_s", f.rates)
        report.figure(f"{tree}_swaps_caused", f.caused)
    mine = figures["swapd"]
    if args.before is not None:
        old = figures["before"]
        print(f"before: thrashed / quiet p50 {old.p50('thrash') / old.p50('quiet'):.2f}x")
    report.check("victims_p50", mine.p50("thrash") / mine.p50("quiet"))
    report.check("thrash_swaps", mine.swaps)
    return 0


class Figures:
    """One tree's rounds: each way's latencies, p50 and rate per round, and what the thrashing
    client asked and caused."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {"quiet": [], "thrash": []}
        self.p50s: dict[str, list[float]] = {"quiet": [], "thrash": []}
        self.rates: dict[str, list[float]] = {"quiet": [], "thrash": []}
        self.caused: list[int] = []
        self.asked = 0

    def add(self, way: str, got: list[float], sent: int, swaps: int, seconds: float) -> None:
        self.times[way] += got
        self.p50s[way].append(statistics.median(got))
        self.rates[way].append(len(got) / seconds)
        if way == "thrash":
            self.caused.append(swaps)
            self.asked += sent

    @property
    def swaps(self) -> int:
        return sum(self.caused)

    def p50(self, way: str) -> float:
        return statistics.median(self.times[way])

    def p95(self, way: str) -> float:
        return statistics.quantiles(self.times[way], n=20)[-1]

    def rate(self, way: str) -> float:
        return statistics.median(self.rates[way])
