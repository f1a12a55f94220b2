"""Whole-swap overhead of swapd: every request needs the other model stopped and its own started.

Two models (swapd's demo server, in no group and without gpus) evict each other, so a request
alternating between them always waits for drain + stop of the other model + start + health check.
The floor, measured in the same run and interleaved with it, is what that request costs without
swapd: spawn the same upstream directly, poll its /health every 5 ms, send the same request.
The time the floor's process then takes to exit on SIGTERM is reported too: swapd must also stop
the previous model, which the floor does not include.

`--upstream fake_model` uses the test suite's upstream (tests/support/upstreams/fake_model.py),
which exits through the interpreter's full teardown (~30 ms here) where the demo server skips it.
`--health-delay 1.6` (fake_model only) makes each upstream answer 503 on /health for that long
after it listens, as a model that loads its weights does: the swap then spends its time in the
health check, polled in the same steps the floor polls in.

`--before DIR` runs a second swapd from an older tree beside this one, in the same rounds
(`DIR/swapd/...` first on `PYTHONPATH`; make one with `mkdir -p DIR/swapd && git archive REV |
tar -x -C DIR/swapd`): the overhead before and after a change, from one run on one machine.

Target (benchmarks/targets.py): the median overhead, swap - floor.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import signal
import statistics
import sys
import time
from pathlib import Path

import aiohttp

from tests.support.paths import UPSTREAMS as STAND_INS
from tests.support.ports import free_port, free_port_range

from .harness.report import Report
from .harness.swapd_run import RunningSwapd

# argv of each upstream; {port} and {model} are filled for the floor, macros for swapd.
UPSTREAMS = {
    "demo": [
        sys.executable,
        "-m",
        "swapd.daemon.cli.demo_server",
        "--port",
        "{port}",
        "--model",
        "{model}",
    ],
    "fake_model": [
        sys.executable,
        str(STAND_INS / "fake_model.py"),
        "--port",
        "{port}",
        "--name",
        "{model}",
    ],
}
CONFIG = """\
healthCheckTimeout: 15
startPort: {start}
models:
  bench-a:
    cmd: {cmd}
    proxy: http://127.0.0.1:${{PORT}}
  bench-b:
    cmd: {cmd}
    proxy: http://127.0.0.1:${{PORT}}
"""


def config_text(upstream: list[str]) -> str:
    argv = [a.replace("{port}", "${PORT}").replace("{model}", "${MODEL_ID}") for a in upstream]
    return CONFIG.format(start=free_port_range(2), cmd=shlex.join(argv))


def upstream_argv(name: str, health_delay: float) -> list[str]:
    argv = list(UPSTREAMS[name])
    if health_delay:
        if name != "fake_model":
            raise SystemExit("--health-delay needs --upstream fake_model")
        argv += ["--health-delay", f"{health_delay:g}"]
    return argv


def body(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "ping"}]}


async def chat(session: aiohttp.ClientSession, base: str, model: str) -> None:
    async with session.post(f"{base}/v1/chat/completions", json=body(model)) as resp:
        text = await resp.text()
        if resp.status != 200:
            raise RuntimeError(f"{model}: HTTP {resp.status}: {text[:500]}")
        assert json.loads(text)["choices"][0]["message"]["content"]


async def through_swapd(session: aiohttp.ClientSession, url: str, model: str) -> float:
    t = time.perf_counter()
    await chat(session, url, model)
    return time.perf_counter() - t


async def floor(
    session: aiohttp.ClientSession, upstream: list[str], model: str
) -> tuple[float, float]:
    """(spawn -> healthy -> answered, SIGTERM -> exit) for the same upstream run directly."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [a.replace("{port}", str(port)).replace("{model}", model) for a in upstream]
    t = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        while True:
            try:
                async with session.get(f"{base}/health") as resp:
                    if resp.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            if proc.returncode is not None:
                raise RuntimeError(f"upstream exited with {proc.returncode}")
            await asyncio.sleep(0.005)
        await chat(session, base, model)
        answered = time.perf_counter() - t
        t = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
        return answered, time.perf_counter() - t
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def swap_phases(session: aiohttp.ClientSession, base: str, last: int) -> str:
    """The medians of the last `last` swaps' phases, from swapd's own swap log (`/api/swaps`):
    drain and stop of the model swapped out, start (spawn until circus runs the process), health
    (until the first 200), and the whole record (the first drain to ready)."""
    async with session.get(f"{base}/api/swaps") as resp:
        if resp.status != 200:
            return f"(no swap log: HTTP {resp.status})"
        records = [r for r in (await resp.json())["swaps"] if r["kind"] == "swap"][-last:]
    if not records:
        return "(no swap recorded)"
    names = ("drain", "stop", "start", "health")
    parts = [
        f"{n} {statistics.median(r['phases'].get(n, 0.0) for r in records) * 1e3:.1f}"
        for n in names
    ]
    whole = statistics.median(r["ended"] - r["began"] for r in records)
    return ", ".join(parts) + f"; the whole swap {whole * 1e3:.1f} ms"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:7.1f} ms"


def main(argv: list[str], report: Report) -> int:
    return asyncio.run(measure(argv, report))


async def measure(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks swap_overhead", description=__doc__)
    parser.add_argument("--rounds", type=int, default=20, help="swaps to time (default 20)")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--upstream", choices=sorted(UPSTREAMS), default="demo")
    parser.add_argument("--health-delay", type=float, default=0.0)
    parser.add_argument("--before", type=Path, help="an older tree to measure beside this one")
    args = parser.parse_args(argv)

    upstream = upstream_argv(args.upstream, args.health_delay)
    models = ["bench-a", "bench-b"]
    names = ["swapd"] if args.before is None else ["swapd", "before"]
    swaps: dict[str, list[float]] = {name: [] for name in names}
    floors: list[float] = []
    stops: list[float] = []
    with contextlib.ExitStack() as running:
        stacks = {"swapd": running.enter_context(RunningSwapd(config_text(upstream)))}
        if args.before is not None:
            env = {**os.environ, "PYTHONPATH": str(args.before.resolve())}
            stacks["before"] = running.enter_context(RunningSwapd(config_text(upstream), env=env))
        for name, swapd in stacks.items():
            print(f"{name}: {swapd.url} (run dir {swapd.run_dir})")
        # Fresh connections each request on the floor; the swapd client keeps its connection to
        # the proxy, as any real client would.
        async with (
            aiohttp.ClientSession() as to_swapd,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as direct,
        ):
            for i in range(args.warmup):
                for swapd in stacks.values():
                    await through_swapd(to_swapd, swapd.url, models[i % 2])
                await floor(direct, upstream, models[i % 2])
            for i in range(args.rounds):
                # The model the warm-up did not end on: every round is a swap, whatever --warmup.
                model = models[(args.warmup + i) % 2]
                # Alternate which goes first, so drift in the machine's load (a shared 2-core
                # box) does not favour any of them.
                order = [*names, "floor"]
                order = order[i % len(order) :] + order[: i % len(order)]
                for name in order:
                    if name == "floor":
                        answered, stopped = await floor(direct, upstream, model)
                        floors.append(answered)
                        stops.append(stopped)
                    else:
                        swaps[name].append(await through_swapd(to_swapd, stacks[name].url, model))
            phases = {
                name: await swap_phases(to_swapd, swapd.url, args.rounds)
                for name, swapd in stacks.items()
            }
        for name, swapd in stacks.items():
            code = swapd.stop()
            if code != 0:
                print(f"warning: {name} exited with {code}; log:\n{swapd.log.read_text()[-3000:]}")

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    delay = f", health after {args.health_delay:g}s" if args.health_delay else ""
    print(f"upstream {args.upstream}{delay}: {args.rounds} swaps (after {args.warmup} warm-up)")
    print(f"load average at the end (1/5/15 min): {load} on {os.cpu_count()} CPUs")
    print(f"floor (spawn + 5 ms health polls + request):   median {ms(statistics.median(floors))}")
    print(f"floor's own SIGTERM -> exit:                    median {ms(statistics.median(stops))}")
    for name in names:
        pairs = [s - f for s, f in zip(swaps[name], floors, strict=True)]
        beyond = [s - f - st for s, f, st in zip(swaps[name], floors, stops, strict=True)]
        print(
            f"{name}: through swapd (stop other + start + request): median "
            f"{ms(statistics.median(swaps[name]))}"
        )
        print(
            f"{name}: overhead per request (swap - floor):           median "
            f"{ms(statistics.median(pairs))}"
        )
        print(
            f"{name}: overhead minus the floor's stop time:          median "
            f"{ms(statistics.median(beyond))}"
        )
        print(f"{name}: where a swap's time goes (its swap log, medians): {phases[name]}")
        report.figure(f"{name}_overhead_ms", [p * 1e3 for p in pairs])
        if name == "swapd":
            report.check("overhead", statistics.median(pairs) * 1e3)
    print(f"per round (ms): {' / '.join(names)} / floor / stop")
    for i in range(args.rounds):
        row = [swaps[name][i] for name in names] + [floors[i], stops[i]]
        print("  " + " ".join(f"{x * 1e3:7.1f}" for x in row))
    report.figure("floor_ms", [f * 1e3 for f in floors])
    return 0
