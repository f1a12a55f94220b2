"""What the activity log, the Prometheus figures and an `/api/events` subscriber cost the request
pipeline (issue 12): the same pipeline with them on and off, side by side in one run, rounds
alternating.

* upstream: nginx answering every POST with a small OpenAI-style JSON body carrying `usage` and
  llama.cpp `timings` (so the token parsing runs);
* off: `swapd run` with `SWAPD_PROXY_ACTIVITY=0` (no activity records, so no request figures and
  no activity events), no events subscriber;
* on: `swapd run` as shipped, with an `/api/events` subscriber reading every event, and
  `/metrics` scraped once a second;
* captures (`captureBuffer`) are off in both, as the target is about the activity log, metrics
  and events; `--captures` turns them on (llama-swap's default, 5 MB) in "on" to see their cost;
* both: one proxy process, small JSON POSTs with a `model` (the key check, route decision,
  admission, forward, relay and accounting all run).

Printed, each with its target: req/s at 32 connections, on / off >= 0.95; median latency at one
connection, on - off <= 0.02 ms; and the proxy's CPU per request, on and off (for scale).

Needs `wrk` and `nginx` (Debian: `apt-get install wrk nginx-light`). Loopback only. Run:
`python benchmarks/observability_cost.py [--seconds 3] [--rounds 5] [--captures]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import psutil
from running_swapd import RunningSwapd, free_port, wait_http_ok
from side_by_side import (
    bench_config,
    cpu_seconds,
    nginx_serving,
    post_script,
    proxy_pid,
    tools_found,
    wrk,
)

CHAT = "/v1/chat/completions"
REPLY = (
    '{"id":"x","object":"chat.completion","choices":[{"index":0,"message":'
    '{"role":"assistant","content":"ok"},"finish_reason":"stop"}],'
    '"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15},'
    '"timings":{"prompt_n":12,"predicted_n":3,"prompt_per_second":900.5,'
    '"predicted_per_second":61.2,"cache_n":0}}'
)
# The upstream: every POST answered with REPLY.
SERVER = """
  server {{
    listen 127.0.0.1:{port};
    location / {{ default_type application/json; return 200 '{reply}'; }}
  }}"""


@contextlib.contextmanager
def nginx(tmp: Path) -> Iterator[int]:
    port = free_port()
    server = SERVER.format(port=port, reply=REPLY)
    with nginx_serving(tmp, server, (f"http://127.0.0.1:{port}/",)):
        yield port


@contextlib.contextmanager
def swapd(config: str, env: dict[str, str]) -> Iterator[RunningSwapd]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        running = RunningSwapd(config).__enter__()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        wait_http_ok(running.url + "/upstream/bench/", 30)
        yield running
    finally:
        running.stop()


def daemon_cpu(circusd_pid: int, proxy: int) -> float:
    """CPU seconds of swapd's processes besides the proxy (the daemon, circusd), models aside."""
    total = cpu_seconds(circusd_pid)
    for child in psutil.Process(circusd_pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.pid != proxy and "swapd" in " ".join(child.cmdline()):
                total += cpu_seconds(child.pid)
    return total


class Watcher:
    """An `/api/events` subscriber reading everything, and a `/metrics` scrape every second, in a
    thread of their own (what a dashboard and Prometheus do)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.events = 0
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    async def _run(self) -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + "/api/events") as resp,
        ):
            last = time.monotonic()
            while not self._stop.is_set():
                try:
                    chunk = await asyncio.wait_for(resp.content.readany(), 0.2)
                except TimeoutError:
                    chunk = b""
                self.events += chunk.count(b"event:message")
                if time.monotonic() - last >= 1:
                    last = time.monotonic()
                    await asyncio.to_thread(self._scrape)

    def _scrape(self) -> None:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            resp.read()
        self.scrapes += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--no-subscriber", action="store_true", help="on without the events subscriber and scrapes"
    )
    parser.add_argument("--captures", action="store_true", help="on with captureBuffer: 5")
    args = parser.parse_args()
    if not tools_found():
        return 2
    with tempfile.TemporaryDirectory(prefix="swapd-bench-observe-") as tmp_name:
        tmp = Path(tmp_name)
        script = post_script(tmp)
        with nginx(tmp) as port:
            config = bench_config(port, head="healthCheckTimeout: 15\ncaptureBuffer: {captures}\n")
            with (
                swapd(config.format(captures=0), {"SWAPD_PROXY_ACTIVITY": "0"}) as off,
                swapd(
                    config.format(captures=5 if args.captures else 0), {"SWAPD_PROXY_ACTIVITY": "1"}
                ) as on,
                Watcher(on.url) if not args.no_subscriber else contextlib.nullcontext() as watcher,
            ):
                targets = {"off": off, "on": on}
                pids = {name: proxy_pid(s.pid) for name, s in targets.items()}
                rps: dict[str, list[float]] = {t: [] for t in targets}
                p50: dict[str, list[float]] = {t: [] for t in targets}
                cpu: dict[str, list[float]] = {t: [] for t in targets}
                rest: dict[str, list[float]] = {t: [] for t in targets}
                for _ in range(args.rounds):
                    for name, running in targets.items():
                        before = cpu_seconds(pids[name])
                        others = daemon_cpu(running.pid, pids[name])
                        rate = wrk(running.url + CHAT, 32, args.seconds, script)[0]
                        used = cpu_seconds(pids[name]) - before
                        rps[name].append(rate)
                        cpu[name].append(used / (rate * args.seconds) * 1e6)
                        others = daemon_cpu(running.pid, pids[name]) - others
                        rest[name].append(others / (rate * args.seconds) * 1e6)
                        p50[name].append(wrk(running.url + CHAT, 1, args.seconds, script)[1])
                time.sleep(0.5)
                events = watcher.events if watcher is not None else 0
                scrapes = watcher.scrapes if watcher is not None else 0
                with urllib.request.urlopen(on.url + "/api/metrics/stats", timeout=10) as resp:
                    recorded = resp.read()
    return report(args, rps, p50, cpu, rest, events, scrapes, recorded)


def report(
    args: argparse.Namespace,
    rps: dict[str, list[float]],
    p50: dict[str, list[float]],
    cpu: dict[str, list[float]],
    rest: dict[str, list[float]],
    events: int,
    scrapes: int,
    recorded: bytes,
) -> int:
    med = {name: statistics.median(values) for name, values in rps.items()}
    lat = {name: statistics.median(values) for name, values in p50.items()}
    per = {name: statistics.median(values) for name, values in cpu.items()}
    daemon = {name: statistics.median(values) for name, values in rest.items()}
    print(f"observability cost, {args.rounds} rounds of {args.seconds:g}s, {time.ctime()}")
    for name in ("off", "on"):
        print(
            f"  {name:3s}: {med[name]:9.0f} req/s at 32 connections, p50 {lat[name]:.3f} ms at 1, "
            f"{per[name]:.1f} us CPU/request in the proxy, {daemon[name]:.1f} in the daemon"
        )
    added_cpu = per["on"] + daemon["on"] - per["off"] - daemon["off"]
    print(
        f"  CPU per request on - off (proxy + daemon): {added_cpu:+.1f} us = "
        f"{added_cpu / (per['off'] + daemon['off']) * 100:+.1f} % (less noisy than req/s)"
    )
    print(f"  the subscriber got {events} events; /metrics scraped {scrapes} times")
    print(f"  the daemon's stats: {recorded[:160].decode(errors='replace')}")
    ratio = med["on"] / med["off"]
    added = lat["on"] - lat["off"]
    ok_rps, ok_lat = ratio >= 0.95, added <= 0.02
    print(f"  req/s on / off = {ratio:.3f} (target >= 0.95) {'ok' if ok_rps else 'MISSED'}")
    print(
        f"  p50 on - off = {added * 1000:+.1f} us (target <= 20 us) {'ok' if ok_lat else 'MISSED'}"
    )
    return 0 if ok_rps and ok_lat else 1


if __name__ == "__main__":
    sys.exit(main())
