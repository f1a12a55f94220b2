"""What the activity log, the Prometheus figures and an `/api/events` subscriber cost the request
pipeline (issue 12): the same pipeline with them on and off, side by side in one run.

* upstream: nginx answering every POST with a small OpenAI-style JSON body carrying `usage` and
  llama.cpp `timings` (so the token parsing runs);
* off: `swapd run` with `SWAPD_PROXY_ACTIVITY=0` (no activity records, so no request figures and
  no activity events), no events subscriber; "off again" is a second one, the A/A pair;
* on: `swapd run` as shipped, with an `/api/events` subscriber reading every event, and
  `/metrics` scraped once a second;
* captures (`captureBuffer`) are off in both, as the target is about the activity log, metrics
  and events; `--captures` turns them on (llama-swap's default, 5 MB) in "on" to see their cost;
* all three: one proxy process, small JSON POSTs with a `model` (the key check, route decision,
  admission, forward, relay and accounting all run).

Each round runs the three, in a rotating order, at 32 connections (req/s) and then at one (median
latency), once per CPU layout (`harness/paired.py`: `shared`, where the kernel places every
process, and `pinned`, the proxy on a CPU of its own and everything else, the daemon included, on
the others).
A figure is the median over rounds of its ratio to (or difference from) "off" in the same round,
with a 90 % bootstrap interval; the A/A line is what the same reading gives between two identical
configurations, so a cost smaller than its spread is not shown by this machine. "On / both offs"
divides each round's "on" by the mean of its two "off" runs (two processes on the baseline's
side of every round rather than one).

Judged by its targets (benchmarks/targets.py), once per layout: on / off req/s at 32
connections, and on - off median latency at one connection; printed for scale, the CPU per
request of the proxy and of the daemon. Needs `wrk` and `nginx`. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil

from tests.support.paths import REPO
from tests.support.ports import free_port

from .harness.paired import LAYOUTS, median_interval, paired, paired_to_both, place, rotated
from .harness.report import Report
from .harness.side_by_side import (
    bench_config,
    cpu_seconds,
    nginx_serving,
    post_script,
    wrk,
)
from .harness.swapd_run import RunningSwapd, wait_http_ok

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
    with RunningSwapd(config, env=os.environ | env) as running:
        wait_http_ok(running.url + "/upstream/bench/", 30)
        yield running


def daemon_cpu(circusd_pid: int, proxy: int) -> float:
    """CPU seconds of swapd's processes besides the proxy (the daemon, circusd), models aside."""
    total = cpu_seconds(circusd_pid)
    for child in psutil.Process(circusd_pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.pid != proxy and "swapd" in " ".join(child.cmdline()):
                total += cpu_seconds(child.pid)
    return total


class Watcher:
    """An `/api/events` subscriber reading everything, and a `/metrics` scrape every second (what
    a dashboard and Prometheus do), in a process and a session of their own, as a browser and a
    Prometheus server are: in this process, the subscriber would take its CPU from wrk's and
    nginx's share (the kernel's autogroup scheduling shares the CPU out by session)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.events = 0
        self.scrapes = 0
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Watcher:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __spec__.name, "--watch", self.url],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() != "subscribed":
            raise RuntimeError("the events subscriber did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        self._proc.send_signal(signal.SIGTERM)
        counts = self._proc.stdout.read().split()
        self._proc.wait(10)
        if len(counts) == 2:
            self.events, self.scrapes = int(counts[0]), int(counts[1])

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid


async def watch(url: str) -> None:
    """The subscriber process: until SIGTERM, then prints `events scrapes`."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    events = scrapes = 0
    marker = b"event:message"
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/api/events") as resp:
            print("subscribed", flush=True)
            last, carry = time.monotonic(), b""
            while not stop.is_set():
                try:
                    chunk = await asyncio.wait_for(resp.content.readany(), 0.2)
                except TimeoutError:
                    chunk = b""
                data = carry + chunk
                events += data.count(marker)
                carry = data[-(len(marker) - 1) :] if marker not in data[-len(marker) :] else b""
                if time.monotonic() - last >= 1:
                    last = time.monotonic()
                    async with session.get(url + "/metrics") as scrape:
                        await scrape.read()
                    scrapes += 1
    print(events, scrapes, flush=True)


CONFIGS = ("off", "off again", "on")  # "off again": the A/A pair, what noise alone reads


@dataclass
class Figures:
    """One configuration's figures in one layout, a value per round."""

    rps: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)  # ms
    proxy_us: list[float] = field(default_factory=list)  # proxy CPU per request
    daemon_us: list[float] = field(default_factory=list)  # daemon + circusd CPU per request
    watcher_us: list[float] = field(default_factory=list)  # the subscriber's, for "on"


def measure(
    running: RunningSwapd,
    proxy: int,
    seconds: float,
    script: Path,
    into: Figures,
    watcher: int | None,
) -> None:
    before, others = cpu_seconds(proxy), daemon_cpu(running.pid, proxy)
    watching = cpu_seconds(watcher)
    rate = wrk(running.url + CHAT, 32, seconds, script)[0]
    requests = rate * seconds
    into.rps.append(rate)
    into.proxy_us.append((cpu_seconds(proxy) - before) / requests * 1e6)
    into.daemon_us.append((daemon_cpu(running.pid, proxy) - others) / requests * 1e6)
    into.watcher_us.append((cpu_seconds(watcher) - watching) / requests * 1e6)
    into.p50.append(wrk(running.url + CHAT, 1, max(1, int(seconds // 2)), script)[1])


def main(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks observability_cost", description=__doc__)
    parser.add_argument("--seconds", type=float, default=2, help="of each round at 32 connections")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument(
        "--layouts", default=",".join(LAYOUTS), help="shared, pinned or both (paired.py)"
    )
    parser.add_argument(
        "--no-subscriber", action="store_true", help="on without the events subscriber and scrapes"
    )
    parser.add_argument("--captures", action="store_true", help="on with captureBuffer: 5")
    args = parser.parse_args(argv)
    layouts = [name for name in args.layouts.split(",") if name]
    if not set(layouts) <= set(LAYOUTS):
        parser.error(f"--layouts: of {', '.join(LAYOUTS)}")
    figures = {(layout, name): Figures() for layout in layouts for name in CONFIGS}
    events = scrapes = 0
    recorded = b""
    with tempfile.TemporaryDirectory(prefix="swapd-bench-observe-") as tmp_name:
        tmp = Path(tmp_name)
        script = post_script(tmp)
        with nginx(tmp) as port:
            config = bench_config(port, head="healthCheckTimeout: 15\ncaptureBuffer: {captures}\n")
            envs = {
                "off": (config.format(captures=0), {"SWAPD_PROXY_ACTIVITY": "0"}),
                "on": (
                    config.format(captures=5 if args.captures else 0),
                    {"SWAPD_PROXY_ACTIVITY": "1"},
                ),
            }
            envs["off again"] = envs["off"]
            for round_no in range(args.rounds):
                # Fresh processes every round: a Python process's own luck (its hash seed and
                # memory layout) moves its speed by as much as the cost measured here, and
                # only averages out over processes (as pyperf runs many).
                with contextlib.ExitStack() as stack:
                    # Started in the round's order too, so that none is always started first:
                    # with "off" always first, the A/A pair averaged 0.964 over 15 readings; the
                    # first run with the order rotated read 1.10 and 1.12. Start order moves
                    # less than this machine's swings do, but no configuration should always
                    # have it.
                    order = rotated(CONFIGS, round_no)
                    targets = {n: stack.enter_context(swapd(*envs[n])) for n in order}
                    watcher = None
                    if not args.no_subscriber:
                        watcher = stack.enter_context(Watcher(targets["on"].url))
                    proxies = {name: s.proxy.pid for name, s in targets.items()}
                    others = (
                        nginx_pids(tmp)
                        + ([watcher.pid] if watcher is not None else [])
                        + [
                            p.pid
                            for s in targets.values()
                            for p in [psutil.Process(s.pid), *psutil.Process(s.pid).children(True)]
                            if p.pid not in proxies.values()
                        ]
                    )
                    for running in targets.values():  # warm-up, uncounted
                        wrk(running.url + CHAT, 32, 1, script)
                    for layout in layouts:
                        if not place(layout, proxies.values(), others):
                            continue
                        for name in order:
                            into = figures[layout, name]
                            sub = watcher.pid if watcher is not None and name == "on" else None
                            measure(targets[name], proxies[name], args.seconds, script, into, sub)
                    place("shared", proxies.values(), others)
                    stats_url = targets["on"].url + "/api/metrics/stats"
                    with urllib.request.urlopen(stats_url, timeout=10) as resp:
                        recorded = resp.read()
                if watcher is not None:
                    events, scrapes = events + watcher.events, scrapes + watcher.scrapes
    print(f"observability cost, {args.rounds} rounds of {args.seconds:g}s, {time.ctime()}")
    for layout in layouts:
        if figures[layout, "off"].rps:
            judge(report, layout, figures)
    print(f"  the subscriber got {events} events; /metrics scraped {scrapes} times")
    print(f"  the daemon's stats: {recorded[:120].decode(errors='replace')}")
    report.figure("rounds", {f"{layout}/{name}": vars(f) for (layout, name), f in figures.items()})
    return 0


def nginx_pids(tmp: Path) -> list[int]:
    """nginx's master and its worker."""
    master = psutil.Process(int((tmp / "nginx.pid").read_text()))
    return [master.pid] + [p.pid for p in master.children()]


def judge(report: Report, layout: str, figures: dict[tuple[str, str], Figures]) -> None:
    off, on = figures[layout, "off"], figures[layout, "on"]
    med = statistics.median
    print(f"  layout {layout}:")
    for name in CONFIGS:
        f = figures[layout, name]
        print(
            f"    {name:9s}: {med(f.rps):7.0f} req/s at 32 connections, p50 {med(f.p50):.3f} ms "
            f"at 1; CPU per request: proxy {med(f.proxy_us):.1f} us, "
            f"daemon {med(f.daemon_us):.1f} us"
        )
    for name, label in (("off again", "off again / off (A/A)"), ("on", "on / off")):
        f = figures[layout, name]
        rps = median_interval(paired(f.rps, off.rps))
        lat = median_interval([(a - b) * 1000 for a, b in zip(f.p50, off.p50, strict=True)])
        # What one proxy core serves (1 / its CPU per request): the proxy's own share, whatever
        # wrk, nginx, the daemon and the subscriber take from the rest of the machine.
        core = median_interval(paired(off.proxy_us, f.proxy_us))
        line = (
            f"    {label:22s} req/s {rps[0]:.3f} [{rps[1]:.3f}, {rps[2]:.3f}], "
            f"p50 {lat[0]:+.1f} us [{lat[1]:+.1f}, {lat[2]:+.1f}], "
            f"requests per proxy CPU second {core[0]:.3f} [{core[1]:.3f}, {core[2]:.3f}]"
        )
        print(line)
        if name == "on":
            report.check("rps", rps[0], label=layout)
            report.check("p50", lat[0], label=layout)
    both = median_interval(paired_to_both(on.rps, off.rps, figures[layout, "off again"].rps))
    print(
        f"    on / both offs         req/s {both[0]:.3f} [{both[1]:.3f}, {both[2]:.3f}] (each "
        "round's on over the mean of its two off runs)"
    )
    print(
        f"    on - off, CPU per request: proxy {med(on.proxy_us) - med(off.proxy_us):+.1f} us, "
        f"daemon {med(on.daemon_us) - med(off.daemon_us):+.1f} us; the subscriber (a dashboard's "
        f"CPU, not swapd's) {med(on.watcher_us):.1f} us"
    )


if __name__ == "__main__":  # the subscriber's process (`Watcher`): `--watch URL`
    asyncio.run(watch(sys.argv[2]))
