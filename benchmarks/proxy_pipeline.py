"""The request pipeline's cost, side by side with its floor, in one run (issue 9, "Speed"; it
holds what proxy_throughput.py measured before, the nginx ratio among them).

Contenders, all measured against the same upstreams in the same run, rounds alternating:
* direct: the upstream itself (nginx answering `return 200`), and nginx as a reverse proxy to it,
  for scale;
* floor: aiohttp's server forwarding through swapd's lean pool with no features
  (`harness/pipeline_floor.py`);
* bare: a bare aiohttp proxy, aiohttp's server and aiohttp's client (`harness/contenders.py`);
* swapd: the real `swapd run` (circusd + daemon + one proxy process), small JSON POSTs carrying a
  `model`, so it does its real work (key check, route decision, admission, forward, accounting).

Figures, each judged by its target in benchmarks/targets.py:
* req/s at 32 connections: swapd against the floor, the bare proxy and nginx;
* median latency at 1 connection, added over direct: swapd's over the floor's, and the bare
  proxy's added latency against swapd's;
* SSE events relayed per second through swapd vs directly from the model, with
  tests/support/upstreams/fake_model.py's `/sse` as the model;
* time to first byte of a streamed chat completion through swapd vs direct;
* `--streams` concurrent open streams through swapd, none failing;
* the proxy process's resident memory when idle (before and after the load); with `--before`
  a tree of the commit before issue 9 (`PRE_ISSUE_9`), the idle target is judged side by side.
The proxy's CPU per request (user + system of its process over the 32-connection run) is printed
too: the figure a busy machine disturbs least.

`--before DIR` adds a second swapd, "before", run from an older tree (`DIR/swapd/...`, put
first on `PYTHONPATH`; make one with `mkdir -p DIR/swapd && git archive REV | tar -x -C
DIR/swapd`), measured beside the others at 32 and at 1 connection: before/after figures of a
change in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from tests.support.ports import free_port

from .harness.contenders import bare_proxy, fake_model, floor
from .harness.report import Report
from .harness.side_by_side import (
    bench_and_sse_config,
    cpu_seconds,
    nginx,
    post_script,
    wrk,
)
from .harness.streams import CHAT, SSE_EVENTS, first_byte_times, open_streams, sse_rounds
from .harness.swapd_run import RunningSwapd, wait_http_ok

TTFB_REQUESTS = 300
IDLE_RSS_BEFORE_MB = 46.1  # the proxy's idle RSS before issue 9 (benchmarks/HISTORY.md)
PRE_ISSUE_9 = "41d4165"  # the last commit before issue 9's pipeline (hot_path.py still there)


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 1e6


def main(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks proxy_pipeline", description=__doc__)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--before", type=Path, help="an older tree to measure beside this one")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="swapd-bench-pipeline-") as tmp_name:
        tmp = Path(tmp_name)
        script = post_script(tmp)
        sse_port = free_port()
        with (
            nginx(tmp) as (direct, via_nginx),
            fake_model() as model_direct,
        ):
            upstream_port = int(direct.rsplit(":", 1)[1])
            config = bench_and_sse_config(upstream_port, sse_port, args.streams * 2)
            with (
                floor(upstream_port) as (via_floor, floor_pid),
                bare_proxy(tmp, direct) as (via_bare, bare_pid),
                RunningSwapd(config) as swapd,
                contextlib.ExitStack() as extra,
            ):
                before = None
                if args.before is not None:
                    env = {**os.environ, "PYTHONPATH": str(args.before.resolve())}
                    before = extra.enter_context(RunningSwapd(config, env=env))
                    wait_http_ok(before.url + "/upstream/bench/", 30)
                for warm in ("/upstream/bench/", "/upstream/sse/health"):
                    wait_http_ok(swapd.url + warm, 30)
                pid = swapd.proxy.pid
                time.sleep(2)  # idle is the point: let start-up garbage settle
                idle_before = rss_mb(pid)
                # The older tree's proxy, idle for as long, in the same run.
                idle_older = rss_mb(before.proxy.pid) if before is not None else None
                targets = {
                    "direct": direct,
                    "nginx": via_nginx,
                    "floor": via_floor,
                    "bare": via_bare,
                    "swapd": swapd.url,
                }
                # CPU per request (user + system) of each proxy process: what it costs,
                # whatever else the shared machine runs.
                pids = {"floor": floor_pid, "bare": bare_pid, "swapd": pid}
                if before is not None:
                    targets["before"] = before.url
                    pids["before"] = before.proxy.pid
                rps: dict[str, list[float]] = {t: [] for t in targets}
                p50: dict[str, list[float]] = {t: [] for t in targets}
                cpu: dict[str, list[float]] = {t: [] for t in pids}
                for _ in range(args.rounds):
                    for name, base in targets.items():
                        used = cpu_seconds(pids.get(name))
                        rate = wrk(base + CHAT, 32, args.seconds, script)[0]
                        rps[name].append(rate)
                        if name in pids:
                            used = cpu_seconds(pids[name]) - used
                            cpu[name].append(used / (rate * args.seconds) * 1e6)
                        p50[name].append(wrk(base + CHAT, 1, args.seconds, script)[1])

                sse = sse_rounds(model_direct, swapd.url, args.rounds)

                ttfb: dict[str, list[float]] = {"direct": [], "swapd": []}
                for _ in range(3):
                    for name, base, model in (
                        ("direct", model_direct, "sse-direct"),
                        ("swapd", swapd.url, "sse"),
                    ):
                        ttfb[name] += asyncio.run(first_byte_times(base, model, TTFB_REQUESTS))

                streams_url = f"{swapd.url}/upstream/sse/slow?n=3&delay=1"
                done, failed, held = asyncio.run(open_streams(streams_url, args.streams))
                time.sleep(2)
                idle_after = rss_mb(pid)

    figures = (rps, p50, cpu, sse, ttfb)
    idle = (idle_before, idle_after, idle_older)
    judge(report, args, targets, figures, (done, failed, held), idle)
    return 0


def judge(
    report: Report,
    args: argparse.Namespace,
    targets: dict[str, str],
    figures: tuple[dict[str, list[float]], ...],
    streams: tuple[int, int, float],
    idle: tuple[float, float, float | None],
) -> None:
    rps, p50, cpu, sse, ttfb = figures
    idle_before, idle_after, idle_older = idle
    med = {name: statistics.median(values) for name, values in rps.items()}
    lat = {name: statistics.median(values) for name, values in p50.items()}
    print(f"req/s at 32 connections, small JSON POSTs ({args.rounds} rounds of {args.seconds:g}s):")
    for name in targets:
        rounds = ", ".join(f"{v:,.0f}" for v in rps[name])
        print(f"  {name:7s} {med[name]:>10,.0f}   ({rounds})")
    report.figure("rps", rps)
    report.check("floor_rps", med["swapd"] / med["floor"])
    report.check("bare_rps", med["swapd"] / med["bare"])
    report.check("nginx_rps", med["swapd"] / med["nginx"])
    if "before" in med:
        print(f"  before / floor = {med['before'] / med['floor']:.3f} (the older tree, same run)")
    per_request = {name: statistics.median(values) for name, values in cpu.items()}
    report.figure("proxy_cpu_us_per_request", per_request)
    print(
        "  proxy CPU per request at 32 connections: "
        + ", ".join(f"{name} {us:.0f} us" for name, us in per_request.items())
        + f" (swapd / floor = {per_request['swapd'] / per_request['floor']:.2f})"
    )

    print("median latency at 1 connection (added over direct):")
    added = {name: lat[name] - lat["direct"] for name in targets}
    for name in targets:
        rounds = ", ".join(f"{v:.3f}" for v in p50[name])
        print(f"  {name:7s} {lat[name]:.3f} ms   adds {added[name]:+.3f} ms   ({rounds})")
    report.figure("p50_ms", p50)
    report.check("floor_latency", added["swapd"] - added["floor"])
    if "before" in added:
        print(f"  before adds {added['before'] - added['floor']:+.3f} ms over the floor")
    bare_ratio = added["bare"] / added["swapd"] if added["swapd"] > 0 else float("inf")
    report.check("bare_latency", bare_ratio)

    sse_med = {k: statistics.median(v) for k, v in sse.items()}
    sse_ratio = sse_med["swapd"] / sse_med["direct"]
    print(f"SSE relay ({len(sse['swapd'])} rounds of {SSE_EVENTS:,} events of 64 bytes):")
    print(f"  direct {sse_med['direct']:,.0f} events/s, swapd {sse_med['swapd']:,.0f} events/s")
    for name, values in sse.items():
        print(f"  {name:7s} per round: " + ", ".join(f"{v:,.0f}" for v in values))
    report.figure("sse_events_per_s", sse)
    report.check("sse", sse_ratio)

    first = {k: statistics.median(v) * 1000 for k, v in ttfb.items()}
    fastest = {k: min(v) * 1000 for k, v in ttfb.items()}
    extra = first["swapd"] - first["direct"]
    print(f"time to first byte of a streamed chat completion ({len(ttfb['swapd'])} requests each):")
    print(f"  median: direct {first['direct']:.3f} ms, swapd {first['swapd']:.3f} ms")
    report.figure("first_byte_ms", first)
    report.check("first_byte", extra)
    print(
        f"  fastest: direct {fastest['direct']:.3f} ms, swapd {fastest['swapd']:.3f} ms "
        f"(adds {fastest['swapd'] - fastest['direct']:+.3f} ms: what load cannot add to)"
    )

    done, failed, held = streams
    print(
        f"concurrent streams: {done} of {args.streams} completed, {failed} failed; all were open "
        f"at once after {held:.2f}s"
    )
    report.check("streams_failed", failed)
    print(f"proxy idle RSS: {idle_before:.1f} MB before the load, {idle_after:.1f} MB after")
    report.figure("idle_rss_mb", {"before_load": idle_before, "after_load": idle_after})
    if idle_older is not None:
        # Side by side: the only comparison a machine's state (libraries, allocator) cannot skew.
        print(f"  the older tree's proxy, idle as long in the same run: {idle_older:.1f} MB")
        report.check("idle_rss", idle_before - idle_older)
    else:
        print(
            f"  (recorded before issue 9, another day: {IDLE_RSS_BEFORE_MB} MB; for the target "
            f"run with --before a tree of {PRE_ISSUE_9})"
        )
