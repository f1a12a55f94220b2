"""Whole-swap overhead of swapd: every request needs the other model stopped and its own started.

Two models (swapd's demo server, in no group and without gpus) evict each other, so a request
alternating between them always waits for drain + stop of the other model + start + health check.
The floor, measured in the same run and interleaved with it, is what that request costs without
swapd: spawn the same upstream directly, poll its /health every 5 ms, send the same request.
The time the floor's process then takes to exit on SIGTERM is reported too: swapd must also stop
the previous model, which the floor does not include.

    python benchmarks/swap_overhead.py [--rounds 20] [--upstream demo|fake_model]

`--upstream fake_model` uses the test suite's upstream (tests/support/upstreams/fake_model.py),
which exits through the interpreter's full teardown (~30 ms here) where the demo server skips it.

Target: median overhead (swap - floor) <= 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import statistics
import sys
import time
from pathlib import Path

import aiohttp
from running_swapd import RunningSwapd, free_port

ROOT = Path(__file__).resolve().parent.parent
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
        str(ROOT / "tests" / "support" / "upstreams" / "fake_model.py"),
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
    return CONFIG.format(start=free_port(consecutive=2), cmd=shlex.join(argv))


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


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:7.1f} ms"


async def main() -> int:
    parser = argparse.ArgumentParser(description="swapd whole-swap overhead vs a direct floor")
    parser.add_argument("--rounds", type=int, default=20, help="swaps to time (default 20)")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--upstream", choices=sorted(UPSTREAMS), default="demo")
    args = parser.parse_args()

    upstream = UPSTREAMS[args.upstream]
    config = config_text(upstream)
    models = ["bench-a", "bench-b"]
    swaps: list[float] = []
    floors: list[float] = []
    stops: list[float] = []
    with RunningSwapd(config) as swapd:
        print(f"swapd {swapd.url} (run dir {swapd.run_dir})")
        # Fresh connections each request on the floor; the swapd client keeps its connection to
        # the proxy, as any real client would.
        async with (
            aiohttp.ClientSession() as to_swapd,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as direct,
        ):
            for i in range(args.warmup):
                await through_swapd(to_swapd, swapd.url, models[i % 2])
                await floor(direct, upstream, models[i % 2])
            for i in range(args.rounds):
                model = models[i % 2]
                # Alternate which of the pair goes first, so drift in the machine's load
                # (a shared 2-core box) does not favour either side.
                if i % 4 < 2:
                    swaps.append(await through_swapd(to_swapd, swapd.url, model))
                    answered, stopped = await floor(direct, upstream, model)
                else:
                    answered, stopped = await floor(direct, upstream, model)
                    swaps.append(await through_swapd(to_swapd, swapd.url, model))
                floors.append(answered)
                stops.append(stopped)
        code = swapd.stop()
        if code != 0:
            print(f"warning: swapd exited with {code}; log:\n{swapd.log.read_text()[-3000:]}")

    pairs = [s - f for s, f in zip(swaps, floors, strict=True)]
    beyond_stop = [s - f - st for s, f, st in zip(swaps, floors, stops, strict=True)]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"upstream {args.upstream}: {args.rounds} swaps (after {args.warmup} warm-up)")
    print(f"load average at the end (1/5/15 min): {load} on {os.cpu_count()} CPUs")
    print(f"through swapd (stop other + start + request): median {ms(statistics.median(swaps))}")
    print(f"floor (spawn + 5 ms health polls + request):   median {ms(statistics.median(floors))}")
    print(f"floor's own SIGTERM -> exit:                    median {ms(statistics.median(stops))}")
    print(f"overhead per request (swap - floor):           median {ms(statistics.median(pairs))}")
    beyond = statistics.median(beyond_stop)
    print(f"overhead minus the floor's stop time:          median {ms(beyond)}")
    print("per round (ms): swap / floor / stop")
    for s, f, st in zip(swaps, floors, stops, strict=True):
        print(f"  {s * 1e3:7.1f} {f * 1e3:7.1f} {st * 1e3:7.1f}")
    target = statistics.median(pairs) <= 0.020
    print(f"target median overhead <= 20 ms: {'met' if target else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
