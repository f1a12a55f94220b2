"""Where a model request's CPU goes, stage by stage, in instructions: a count that the load of a
shared machine does not change (wrk's rates and CPU seconds do; see `proxy_pipeline.py` for
those, side by side).

Against nginx as the upstream and a real `swapd run` (whose daemon sends the routing table), each
of these runs under valgrind's callgrind in turn and serves `--requests` small JSON POSTs (the
benchmark's, over `--connections` kept-alive connections); instructions are counted only while
they run (`callgrind_control -i on/off`), so start-up is left out:

* the floor (`harness/pipeline_floor.py`): aiohttp's server and the lean pool, no feature;
* swapd's proxy process, started as circusd starts it (`python -m swapd.proxy --run-dir ...`,
  here with `--listen`), with everything on, then with stages switched off one after another
  (`harness/pipeline_stages.py`), each row's difference from the row above being that stage's cost.

Needs `valgrind` and `nginx`. Loopback only. It takes a few minutes: valgrind runs Python some
fifty times slower.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.ports import free_port

from .harness.contenders import HARNESS
from .harness.report import Report
from .harness.side_by_side import BODY, bench_config, nginx
from .harness.swapd_run import RunningSwapd, wait_http_ok

# Each row switches off one more stage than the row above (see harness/pipeline_stages.py).
ROWS = (
    ("swapd, everything on", "-"),
    ("  without activity records", "activity"),
    ("  without the access line", "activity,access"),
    ("  without the front checks", "activity,access,front"),
    ("  without finding the model in the body", "activity,access,front,model"),
    ("  without forwarding the client's headers", "activity,access,front,model,headers"),
    ("  the floor's handler instead of the pipeline", "activity,access,front,pipeline"),
)


async def post_many(port: int, count: int, connections: int) -> None:
    body = BODY.encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body

    async def one(n: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(n):
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(f"unexpected answer: {head[:200]!r}")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.lower().split(b"\r\n")
                    if line.startswith(b"content-length:")
                )
                await reader.readexactly(length)
        finally:
            writer.close()

    await asyncio.gather(*(one(count // connections) for _ in range(connections)))


def instructions(
    argv: list[str], health: str, port: int, args: argparse.Namespace, **env: str
) -> float:
    """Instructions per request of the server `argv` runs (listening on `port`)."""
    with tempfile.TemporaryDirectory(prefix="swapd-callgrind-") as tmp:
        out = f"{tmp}/callgrind.out.%p"
        callgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
        proc = subprocess.Popen(
            [*callgrind, f"--callgrind-out-file={out}", *argv],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_http_ok(f"http://127.0.0.1:{port}{health}", 300, interval=0.5)
            asyncio.run(post_many(port, 100, 4))  # connections and pools warm
            control = ["callgrind_control"]
            subprocess.run([*control, "-i", "on", str(proc.pid)], check=True, capture_output=True)
            asyncio.run(post_many(port, args.requests, args.connections))
            subprocess.run([*control, "-i", "off", str(proc.pid)], check=True, capture_output=True)
            subprocess.run([*control, "-d", str(proc.pid)], check=True, capture_output=True)
            # callgrind_control returns once the dump is asked for, not once it is written.
            deadline = time.monotonic() + 60
            while not glob.glob(f"{tmp}/callgrind.out.*.1") and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(0.5)
        finally:
            proc.terminate()
            proc.wait(120)
        totals = [0]
        for name in glob.glob(f"{tmp}/callgrind.out.*"):
            with open(name) as dump:
                totals += [
                    int(line.split()[1])
                    for line in dump
                    if line.startswith(("summary:", "totals:"))
                ]
        return max(totals) / args.requests


def main(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks pipeline_cost", description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args(argv)
    rows: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="swapd-bench-cost-") as tmp_name:
        with nginx(Path(tmp_name)) as (direct, _):
            upstream = int(direct.rsplit(":", 1)[1])
            config = bench_config(upstream)
            with RunningSwapd(config) as swapd:
                wait_http_ok(swapd.url + "/upstream/bench/", 30)
                port = free_port()
                floor_argv = [sys.executable, str(HARNESS / "pipeline_floor.py"), str(port)]
                floor = instructions([*floor_argv, str(upstream)], "/", port, args)
                print(f"instructions per request ({args.requests} requests, callgrind):")
                print(f"  {'floor':48s} {floor:>9,.0f}")
                rows["floor"] = floor
                previous = None
                for label, stages in ROWS:
                    port = free_port()
                    argv = [sys.executable, str(HARNESS / "pipeline_stages.py"), stages, "--"]
                    argv += ["--run-dir", str(swapd.run_dir), "--listen", f"127.0.0.1:{port}"]
                    env = {"SWAPD_PROXY_ACTIVITY": "0"} if "activity" in stages else {}
                    count = instructions(argv, "/health", port, args, **env)
                    step = f"{count - previous:+9,.0f}" if previous is not None else " " * 9
                    if stages.endswith("pipeline"):
                        step = f"{count - floor:+9,.0f} over the floor"
                    print(f"  {label:48s} {count:>9,.0f}  {step}  ({count / floor:.2f}x floor)")
                    previous = count
                    rows[label.strip()] = count
    report.figure("instructions_per_request", rows)
    return 0
