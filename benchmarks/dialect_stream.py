"""What Ollama's dialect costs on a stream: the same streamed chat, N pieces from the same model,
through swapd's OpenAI route (`/v1/chat/completions`, relayed as it is) and through Ollama's
(`/api/chat`, each server-sent event rewritten into an NDJSON line as it passes), side by side in
one run, the two in a rotating order each round.

Figures per round: pieces per second as the client reads them, and the proxy process's CPU time
per piece (user + system, read from /proc before and after); the result is the median over
rounds of Ollama's figure over OpenAI's in the same round (`harness/paired.py`). The model is
tests/support/upstreams/fake_model.py (it streams `x_chunks` pieces as fast as it can).

Target (benchmarks/targets.py): Ollama's pieces per second against the OpenAI route's (the
rewrite parses and writes one small JSON object per piece, on a proxy that otherwise only copies
bytes).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time

import psutil

from tests.support.ports import free_port

from .harness.paired import rotated
from .harness.report import Report
from .harness.side_by_side import FAKE_MODEL
from .harness.swapd_run import RunningSwapd

ROUTES = {
    "openai": ("/v1/chat/completions", {"stream": True}),
    "ollama": ("/api/chat", {}),
}


def one_stream(port: int, route: str, pieces: int) -> tuple[float, int]:
    path, extra = ROUTES[route]
    body = {"model": "bench", "messages": [{"role": "user", "content": "go"}], **extra}
    body["x_chunks" if route == "openai" else "options"] = (
        pieces if route == "openai" else {"x_chunks": pieces}
    )
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    began = time.perf_counter()
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200, response.read()
    data = response.read()
    took = time.perf_counter() - began
    conn.close()
    counted = data.count(b"tok") if route == "openai" else data.count(b'"done":false')
    return took, counted


def cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def main(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks dialect_stream", description=__doc__)
    parser.add_argument("--pieces", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    port = free_port()
    config = f"""
models:
  bench:
    cmd: {sys.executable} {FAKE_MODEL} --port {port} --name bench
    proxy: http://127.0.0.1:{port}
"""
    rates: dict[str, list[float]] = {name: [] for name in ROUTES}
    cpu_per_piece: dict[str, list[float]] = {name: [] for name in ROUTES}
    with RunningSwapd(config) as swapd:
        proxy = swapd.proxy
        for route in ROUTES:  # warm up: the model starts, both ways are used once
            one_stream(swapd.port, route, 10)
        for round_no in range(args.rounds):
            for route in rotated(list(ROUTES), round_no):
                before = cpu(proxy)
                took, counted = one_stream(swapd.port, route, args.pieces)
                spent = cpu(proxy) - before
                assert counted == args.pieces, (route, counted)
                rates[route].append(args.pieces / took)
                cpu_per_piece[route].append(spent / args.pieces * 1e6)
    ratio = statistics.median(o / p for o, p in zip(rates["ollama"], rates["openai"], strict=True))
    # The proxy's CPU per piece, as the ratio of the medians: a round's reading counts in clock
    # ticks (10 ms), too coarse for a ratio per round.
    cpu_ratio = statistics.median(cpu_per_piece["ollama"]) / max(
        statistics.median(cpu_per_piece["openai"]), 1e-9
    )
    for route in ROUTES:
        print(
            f"{route:7s} {statistics.median(rates[route]):9.0f} pieces/s   "
            f"proxy CPU {statistics.median(cpu_per_piece[route]):6.1f} µs/piece"
        )
    print(f"ollama / openai: {ratio:.2f}x pieces/s, {cpu_ratio:.2f}x proxy CPU per piece")
    report.figure("pieces_per_s", rates)
    report.figure("proxy_cpu_us_per_piece", cpu_per_piece)
    report.check("ollama", ratio)
    return 0
