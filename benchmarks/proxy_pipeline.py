"""The request pipeline's cost, side by side with its floor, in one run (issue 9, "Speed").

Targets, all measured against the same upstreams in the same run, rounds alternating:
* direct: the upstream itself (nginx answering `return 200`), and nginx as a reverse proxy to it,
  for scale;
* floor: aiohttp's server forwarding through swapd's lean pool with no features
  (`pipeline_floor.py`);
* bare: a bare aiohttp proxy, aiohttp's server and aiohttp's client (`proxy_throughput.py`);
* swapd: the real `swapd run` (circusd + daemon + one proxy process), small JSON POSTs carrying a
  `model`, so it does its real work (key check, route decision, admission, forward, accounting).

Printed, each with its target:
* req/s at 32 connections: swapd / floor >= 0.9, swapd / bare >= 1.5;
* median latency at 1 connection, added over direct: swapd <= floor + 0.03 ms, and bare's added
  latency >= 1.5x swapd's;
* SSE events relayed per second through swapd vs directly from the model (>= 0.95), with
  tests/support/upstreams/fake_model.py's `/sse` as the model;
* time to first byte of a streamed chat completion through swapd vs direct (<= direct + 0.5 ms);
* 1,000 concurrent open streams through swapd, none failing;
* the proxy process's resident memory when idle (before and after the load); with `--before`
  a tree of the commit before issue 9 (`PRE_ISSUE_9`), the idle target is judged side by side.

`--before DIR` adds a second swapd, "before", run from an older tree (`DIR/swapd/...`, put
first on `PYTHONPATH`; make one with `mkdir -p DIR/swapd && git archive REV | tar -x -C
DIR/swapd`), measured beside the others at 32 and at 1 connection: before/after figures of a
change in one run.

Needs `wrk` and `nginx` (Debian: `apt-get install wrk nginx-light`). Loopback only. Run:
`python benchmarks/proxy_pipeline.py [--seconds 3] [--rounds 3] [--streams 1000] [--before DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_throughput import (
    SSE_EVENTS,
    bare_proxy,
    fake_model,
    open_streams,
    own_session,
    sse_rounds,
)
from running_swapd import RunningSwapd, free_port, wait_http_ok
from side_by_side import (
    bench_and_sse_config,
    cpu_seconds,
    nginx,
    post_script,
    proxy_pid,
    tools_found,
    wrk,
)

HERE = Path(__file__).resolve().parent
TTFB_REQUESTS = 300
IDLE_RSS_BEFORE_MB = 46.1  # the proxy's idle RSS before issue 9 (benchmarks/README.md)
PRE_ISSUE_9 = "41d4165"  # the last commit before issue 9's pipeline (hot_path.py still there)
CHAT = "/v1/chat/completions"


@contextlib.contextmanager
def floor(upstream_port: int) -> Iterator[tuple[str, int]]:
    port = free_port()
    argv = [sys.executable, str(HERE / "pipeline_floor.py"), str(port), str(upstream_port)]
    proc = subprocess.Popen(argv, start_new_session=own_session())
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http_ok(url + "/", 15, interval=0.05)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


async def first_byte_times(url: str, model: str, count: int) -> list[float]:
    """Seconds from sending a streamed chat request to its first event, `count` times in turn
    on one kept-alive connection."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"model": model, "stream": True, "x_chunks": 1}).encode()
    request = (
        f"POST {CHAT} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    reader, writer = await asyncio.open_connection(host, int(port))
    times = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            writer.write(request)
            seen = b""
            while b"data: " not in seen:
                seen += await reader.read(65536)
            times.append(time.perf_counter() - start)
            while not seen.endswith(b"0\r\n\r\n"):  # the rest of the response, chunked
                more = await reader.read(65536)
                if not more:
                    raise ConnectionError(f"{url} closed the connection mid-response")
                seen += more
    finally:
        writer.close()
    return times


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 1e6


def ratio_line(label: str, value: float, target: str, met: bool) -> str:
    return f"  {label} = {value:.3f} (target {target}: {'met' if met else 'MISSED'})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--before", type=Path, help="an older tree to measure beside this one")
    args = parser.parse_args()
    if not tools_found():
        return 2

    with tempfile.TemporaryDirectory(prefix="swapd-bench-pipeline-") as tmp_name:
        tmp = Path(tmp_name)
        script = post_script(tmp)
        sse_port = free_port()
        with (
            nginx(tmp) as (direct, via_nginx),
            fake_model(free_port()) as model_direct,
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
                pid = proxy_pid(swapd.pid)
                time.sleep(2)  # idle is the point: let start-up garbage settle
                idle_before = rss_mb(pid)
                # The older tree's proxy, idle for as long, in the same run.
                idle_older = rss_mb(proxy_pid(before.pid)) if before is not None else None
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
                    pids["before"] = proxy_pid(before.pid)
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
    return report(args, targets, figures, (done, failed, held), idle)


def report(
    args: argparse.Namespace,
    targets: dict[str, str],
    figures: tuple[dict[str, list[float]], ...],
    streams: tuple[int, int, float],
    idle: tuple[float, float, float | None],
) -> int:
    rps, p50, cpu, sse, ttfb = figures
    idle_before, idle_after, idle_older = idle
    med = {name: statistics.median(values) for name, values in rps.items()}
    lat = {name: statistics.median(values) for name, values in p50.items()}
    print(f"req/s at 32 connections, small JSON POSTs ({args.rounds} rounds of {args.seconds:g}s):")
    for name in targets:
        rounds = ", ".join(f"{v:,.0f}" for v in rps[name])
        print(f"  {name:7s} {med[name]:>10,.0f}   ({rounds})")
    to_floor = med["swapd"] / med["floor"]
    to_bare = med["swapd"] / med["bare"]
    print(ratio_line("swapd / floor", to_floor, ">= 0.9", to_floor >= 0.9))
    print(ratio_line("swapd / bare aiohttp proxy", to_bare, ">= 1.5", to_bare >= 1.5))
    if "before" in med:
        print(f"  before / floor = {med['before'] / med['floor']:.3f} (the older tree, same run)")
    per_request = {name: statistics.median(values) for name, values in cpu.items()}
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
    over_floor = added["swapd"] - added["floor"]
    print(
        f"  swapd adds {over_floor:+.3f} ms over the floor "
        f"(target <= +0.030: {'met' if over_floor <= 0.03 else 'MISSED'})"
    )
    if "before" in added:
        print(f"  before adds {added['before'] - added['floor']:+.3f} ms over the floor")
    bare_ratio = added["bare"] / added["swapd"] if added["swapd"] > 0 else float("inf")
    print(ratio_line("bare's added latency / swapd's", bare_ratio, ">= 1.5", bare_ratio >= 1.5))

    sse_med = {k: statistics.median(v) for k, v in sse.items()}
    sse_ratio = sse_med["swapd"] / sse_med["direct"]
    print(f"SSE relay ({len(sse['swapd'])} rounds of {SSE_EVENTS:,} events of 64 bytes):")
    print(f"  direct {sse_med['direct']:,.0f} events/s, swapd {sse_med['swapd']:,.0f} events/s")
    for name, values in sse.items():
        print(f"  {name:7s} per round: " + ", ".join(f"{v:,.0f}" for v in values))
    print(ratio_line("swapd / direct", sse_ratio, ">= 0.95", sse_ratio >= 0.95))

    first = {k: statistics.median(v) * 1000 for k, v in ttfb.items()}
    fastest = {k: min(v) * 1000 for k, v in ttfb.items()}
    extra = first["swapd"] - first["direct"]
    print(f"time to first byte of a streamed chat completion ({len(ttfb['swapd'])} requests each):")
    print(
        f"  median: direct {first['direct']:.3f} ms, swapd {first['swapd']:.3f} ms: swapd adds "
        f"{extra:+.3f} ms (target <= +0.5: {'met' if extra <= 0.5 else 'MISSED'})"
    )
    print(
        f"  fastest: direct {fastest['direct']:.3f} ms, swapd {fastest['swapd']:.3f} ms "
        f"(adds {fastest['swapd'] - fastest['direct']:+.3f} ms: what load cannot add to)"
    )

    done, failed, held = streams
    print(
        f"concurrent streams: {done} of {args.streams} completed, {failed} failed; all were open "
        f"at once after {held:.2f}s (target: no error: {'met' if failed == 0 else 'MISSED'})"
    )
    print(f"proxy idle RSS: {idle_before:.1f} MB before the load, {idle_after:.1f} MB after")
    if idle_older is not None:
        # Side by side: the only comparison a machine's state (libraries, allocator) cannot skew.
        print(
            f"  the older tree's proxy, idle as long in the same run: {idle_older:.1f} MB "
            f"(target: no higher than the tree before issue 9, `--before` {PRE_ISSUE_9}: "
            f"{'met' if idle_before <= idle_older else 'MISSED'})"
        )
    else:
        print(
            f"  (recorded before issue 9, another day: {IDLE_RSS_BEFORE_MB} MB; for the target "
            f"run with --before a tree of {PRE_ISSUE_9})"
        )
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
