"""Every benchmark and every target, once: what `python -m benchmarks` lists and runs, what each
benchmark judges its figures by (`Report.check` reads the bound from here), and what
benchmarks/README.md's table shows (`python -m benchmarks --targets` prints it; a unit test,
tests/unit/test_bench_harness.py, holds the README to it).

A target is "value OP bound": each benchmark works out the value (a ratio, a difference from a
reference measured in the same run, a count) and the table says what it must be.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum


class Op(Enum):
    AT_LEAST = ">="
    AT_MOST = "<="
    UNDER = "<"

    @property
    def holds(self) -> Callable[[float, float], bool]:
        return {Op.AT_LEAST: operator.ge, Op.AT_MOST: operator.le, Op.UNDER: operator.lt}[self]


@dataclass(frozen=True)
class Target:
    key: str
    what: str  # the value judged, in words
    op: Op
    bound: float
    unit: str = ""  # "x" for a ratio

    def met(self, value: float) -> bool:
        return self.op.holds(value, self.bound)

    @property
    def text(self) -> str:
        return f"{self.what} {self.op.value} {self.bound:g}{_spaced(self.unit)}"


@dataclass(frozen=True)
class Benchmark:
    name: str  # the module, benchmarks/<name>.py
    what: str  # one line: what it measures
    quick: tuple[str, ...]  # `--quick`: the arguments of the shortest run that still says something
    needs: tuple[str, ...] = ()  # programs it runs (wrk, nginx, valgrind)
    targets: tuple[Target, ...] = ()
    note: str = ""  # where its figures are read, when it has no target
    targets_by_key: dict[str, Target] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets_by_key", {t.key: t for t in self.targets})


def _spaced(unit: str) -> str:
    return unit if unit in ("", "x", "%") else f" {unit}"


X = "x"
PROXY_TOOLS = ("wrk", "nginx")
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "proxy_pipeline",
        "the request pipeline against its floor (aiohttp's server + swapd's lean pool, no "
        "features), a bare aiohttp proxy, nginx and direct, one run: req/s at 32 connections, "
        "added latency at 1, SSE relayed, first byte of a stream, 1,000 open streams, idle RSS",
        ("--seconds", "1", "--rounds", "1", "--streams", "200"),
        PROXY_TOOLS,
        (
            Target("floor_rps", "swapd's req/s / the floor's", Op.AT_LEAST, 0.9, X),
            Target("bare_rps", "swapd's req/s / the bare aiohttp proxy's", Op.AT_LEAST, 1.5, X),
            Target("nginx_rps", "swapd's req/s / nginx's", Op.AT_LEAST, 0.25, X),
            Target("floor_latency", "swapd's added latency - the floor's", Op.AT_MOST, 0.03, "ms"),
            Target("bare_latency", "the bare proxy's added latency / swapd's", Op.AT_LEAST, 1.5, X),
            Target("sse", "SSE events/s through swapd / direct", Op.AT_LEAST, 0.95, X),
            Target("first_byte", "first byte through swapd - direct", Op.AT_MOST, 0.5, "ms"),
            Target("streams_failed", "concurrent streams that failed", Op.AT_MOST, 0),
            Target(
                "idle_rss",
                "proxy idle RSS - the tree before issue 9's (`--before` 41d4165)",
                Op.AT_MOST,
                0,
                "MB",
            ),
        ),
    ),
    Benchmark(
        "pipeline_cost",
        "where a model request's CPU goes, stage by stage, in instructions (callgrind): the "
        "floor, swapd with everything on, and one more stage switched off per row",
        ("--requests", "200"),
        ("valgrind", "nginx"),
        note="the split of the gap to the floor; a guard rail: no change may raise swapd's "
        "instructions per request by more than 10 % (measure both trees in one run)",
    ),
    Benchmark(
        "proxy_floor",
        "added latency at 1 connection, layer by layer: a uvloop byte relay, aiohttp's server "
        "alone, aiohttp's server + swapd's upstream pool, swapd, beside direct and nginx",
        ("--seconds", "1", "--rounds", "1"),
        PROXY_TOOLS,
        note="where the latency goes",
    ),
    Benchmark(
        "observability_cost",
        "the pipeline with the activity log, /metrics scrapes and an /api/events subscriber on, "
        "against off and a second off (the A/A pair), fresh processes every round, paired "
        "ratios with 90 % bootstrap intervals, in two CPU layouts",
        ("--seconds", "1", "--rounds", "2", "--layouts", "shared"),
        PROXY_TOOLS,
        (
            Target("rps", "on / off req/s at 32 connections", Op.AT_LEAST, 0.95, X),
            Target("p50", "on - off median latency at 1 connection", Op.AT_MOST, 20, "us"),
        ),
    ),
    Benchmark(
        "observability_micro",
        "the observability code in one process, stage by stage (recorder, batch, the daemon's "
        "observer, the events hub): CPU us per request, captures off and on",
        ("--requests", "2000", "--repeat", "1"),
        note="where the cost goes; repeatable where observability_cost is not",
    ),
    Benchmark(
        "dialect_stream",
        "a streamed chat through swapd's OpenAI route and through Ollama's (/api/chat, each "
        "event rewritten as an NDJSON line): pieces/s as the client reads them, proxy CPU a piece",
        ("--pieces", "2000", "--rounds", "2"),
        targets=(Target("ollama", "Ollama's pieces/s / the OpenAI route's", Op.AT_LEAST, 0.5, X),),
    ),
    Benchmark(
        "swap_overhead",
        "requests alternating between two models that evict each other, against a floor "
        "(spawn the same upstream, poll its health every 5 ms, send the request); the swap "
        "log's phases; `--before DIR` measures an older tree in the same rounds",
        ("--rounds", "4", "--warmup", "2"),
        targets=(Target("overhead", "median swap - floor", Op.AT_MOST, 20, "ms"),),
    ),
    Benchmark(
        "sleep_swap",
        "a swap back to a model, request to first byte: swapd with the vllm sleep preset, "
        "swapd with stop and cold start, and by hand (sleep, wake, request: the floor); "
        "`--gpu` each preset's residual after its sleep on a GPU host",
        ("--rounds", "2", "--load", "1", "--wake", "0.1"),
        targets=(
            Target("over_floor", "median sleep swap - the floor", Op.AT_MOST, 50, "ms"),
            Target("vs_cold", "cold swap / sleep swap (median per round)", Op.AT_LEAST, 8, X),
        ),
    ),
    Benchmark(
        "kv_swap",
        "the next turn of a long conversation (2,800 tokens) after a swap away and back, time to "
        "first token on llama.cpp's real server code: with kvCache, without, never swapped; the "
        "save and restore phases",
        ("--rounds", "1"),
        targets=(
            Target(
                "vs_warm",
                "kvCache's first token - 1.5x the never-swapped one",
                Op.AT_MOST,
                100,
                "ms",
            ),
            Target("vs_cold", "first token without kvCache / with it", Op.AT_LEAST, 10, X),
            Target("kv_phases", "kv_save + kv_restore (medians)", Op.AT_MOST, 100, "ms"),
        ),
    ),
    Benchmark(
        "thrash",
        "two clients chatting with one model, alone and while a third asks for two other models "
        "alternately every 100 ms without waiting (`?wait=false`), in alternating rounds: their "
        "p50 and p95, and the swaps the third caused",
        ("--rounds", "1", "--seconds", "4"),
        targets=(
            Target("victims_p50", "the chatting clients' p50, thrashed / quiet", Op.AT_MOST, 2, X),
            Target(
                "thrash_swaps",
                "swaps the thrashing client caused while they chatted",
                Op.AT_MOST,
                0,
            ),
        ),
    ),
    Benchmark(
        "idle_memory",
        "resident memory of circusd + daemon + proxy when idle, before and after loading models",
        ("--settle", "1"),
        targets=(Target("total", "total RSS, idle", Op.AT_MOST, 150, "MB"),),
    ),
    Benchmark(
        "config_scaling",
        "how loading a config grows with its size, for the shapes that were slow, beside shlex "
        "on one quoted word (quadratic)",
        ("--size", "20000", "--rounds", "1"),
        targets=(
            Target("growth", "the worst shape's time for 4x the size / 1x", Op.AT_MOST, 6, X),
        ),
    ),
    Benchmark(
        "hostile_clients",
        "what one hostile client costs everyone else, a quiet and a hostile swapd side by side: "
        "`metrics` (many unknown model names), `readers` (stalled /api/events readers of a "
        "huge line), `subscribers` (many /api/events clients), `upload` (a stalled upload)",
        ("--rows", "metrics,upload", "--names", "2000", "--rounds", "1", "--seconds", "1"),
        targets=(
            Target("metrics_bytes", "/metrics bytes, hostile - quiet", Op.AT_MOST, 16384, "B"),
            Target("scrape_time", "scrape time, hostile - 2x quiet", Op.AT_MOST, 5, "ms"),
            Target("scrapes_failed", "hostile scrapes not answered 200", Op.AT_MOST, 0),
            Target(
                "daemon_stall", "the daemon's longest stall, hostile - quiet", Op.AT_MOST, 5, "ms"
            ),
            Target("readers_rss", "proxy peak RSS - idle, stalled readers", Op.AT_MOST, 64, "MiB"),
            Target(
                "subscribers_cpu",
                "idle proxy CPU, --subscribers reading /api/events",
                Op.UNDER,
                5,
                "%",
            ),
            Target(
                "upload_delay",
                "a swap's delay behind a stalled upload - quiet - the body timeout",
                Op.AT_MOST,
                2,
                "s",
            ),
            Target("ordinary", "an ordinary client's req/s, hostile / quiet", Op.AT_LEAST, 0.8, X),
        ),
    ),
    Benchmark(
        "trace_replay",
        "request traces (benchmarks/traces/: an agent's architect/editor ping-pong, chat with "
        "an embeddings batch, Open WebUI with a task model, ComfyUI jobs with chat, a day of six "
        "users) replayed against stand-ins with the measured start and wake costs, this tree and "
        "`--before REF`'s side by side (`--warm`: also this tree with its llama models asleep "
        "through `sleep: cuda`): swaps, total and p50/p95/p99/max wait, wasted starts",
        ("--scale", "0.5"),
        targets=(
            Target("wasted", "starts wasted (taken out before serving), each trace", Op.AT_MOST, 0),
            Target(
                "collated",
                "total wait / REF's, traces (a) and (c); with `--warm`, the warm tree's",
                Op.AT_MOST,
                0.6,
                X,
            ),
            Target("no_worse", "total wait / REF's, each trace", Op.AT_MOST, 1.05, X),
            Target(
                "p99",
                "p99 wait - (`--max-wait` + the largest swap-in), each trace",
                Op.AT_MOST,
                0,
                "s",
            ),
        ),
    ),
    Benchmark(
        "gpu_check",
        "on a GPU host: NVML's inventory, the memory of a process holding GPU memory, how long "
        "it takes to come back after the process exits (`--quick`: the fake backend); `--full`: "
        "the one prepared GPU check, `sleep: cuda` through swapd's code path and `swapd run`, "
        "each wake verified, then the release and placement checks, in one table (`--fake`: "
        "its dry run)",
        ("--backend", "fake", "--mib", "64"),
        note="figures for docs/gpus.md",
    ),
    Benchmark(
        "gpu_placement_check",
        "on a GPU host: swapd with `gpus: auto` models allocating known memory; the footprint "
        "learned against what was allocated, placement, eviction, exit-to-free times "
        "(`--quick`: the fake NVML)",
        ("--fake", "--mib", "256,512", "--timeout", "60"),
        note="figures for docs/gpus.md",
    ),
)
BY_NAME = {b.name: b for b in BENCHMARKS}


def markdown() -> str:
    """benchmarks/README.md's tables: the benchmarks (how to run each), then every target."""
    lines = [
        "| benchmark | what it measures | needs | `--quick` runs it with |",
        "|---|---|---|---|",
    ]
    for bench in BENCHMARKS:
        needs = ", ".join(bench.needs) or "—"
        lines.append(f"| `{bench.name}` | {bench.what} | {needs} | `{' '.join(bench.quick)}` |")
    lines += ["", "| benchmark | target | value judged | must be |", "|---|---|---|---|"]
    for bench in BENCHMARKS:
        for t in bench.targets:
            bound = f"{t.op.value} {t.bound:g}{_spaced(t.unit)}"
            lines.append(f"| `{bench.name}` | `{t.key}` | {t.what} | {bound} |")
        if not bench.targets:
            lines.append(f"| `{bench.name}` | — | {bench.note} | |")
    return "\n".join(lines) + "\n"
