"""Request traces replayed against the real `swapd run`, this tree and an older one side by side.

Each trace (benchmarks/traces/*.jsonl, written by traces/make_traces.py from fixed seeds) is a
list of requests: when each is sent (or how long after the answer to its client's previous one),
by which client, to which model, of which kind (chat, stream, embeddings, a ComfyUI job, a load).
Its models are stand-ins whose costs are the measured ones (traces/models.json: a llama.cpp start
1.6-2.3 s, a ComfyUI start 11.5 s and wake of milliseconds, a vLLM cold start 10x its wake), all
on one fake GPU, so one runs at a time as on a single-GPU box.

For each trace, this tree's swapd and, with `--before REF`, REF's swapd (its `git archive` on
PYTHONPATH as the `swapd` package: harness/before_tree.py) are started with the same config and
replayed at once, side by side, each with its own stand-ins; `--rounds N` does that N times,
with fresh processes each time, and sums. Per tree: the swaps (starts, swaps
and wakes in its swap log), the total of every request's wait, its p50/p95/p99 and maximum, the
wasted starts (a model brought in for a request and taken out before it served one:
harness/replayer.py says how they are read from `/api/swaps`) and the requests that failed.

`--scale F` multiplies every duration of the replay by F (the stand-ins' starts and wakes, the
generations, the trace's offsets and think times): `--quick` runs at 0.5, half the time. swapd's
own constants are not scaled (the 5 s collation window among them), so a scaled run weighs them
more than a full one does.

`--new-config YAML` adds a mapping to this tree's config alone (merged key by key, under `models`
too), for keys the older tree does not know: `--new-config '{maxWait: 4}'`. `--warm` adds a
third swapd beside them: this tree with the llama models asleep through the CUDA checkpoint
(`sleep: cuda`, issue 39; harness/trace_files.py says what its copies cost), the warm swaps the
older tree cannot make for a llama.cpp server. `--max-wait S` is the
bound the p99 target allows beyond the swap-in cost (default 5: the collation window, the longest
a queued swap waits for busy models today); set it to the `maxWait` given.

Targets (benchmarks/targets.py): no wasted start on any trace; on (a) and (c), the total wait at
most 0.6x REF's (judged on the warm tree when there is one: this tree as a user runs it; the
queue's order alone cannot shorten those traces, whose waits are swap-ins one after another); on
no trace more than 5 % above REF's (each of this tree's runs); p99 wait at most `--max-wait` + the
trace's largest swap-in cost (its slowest model's start, scaled).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import tempfile
from dataclasses import dataclass
from typing import Any

import yaml

from tests.support.ports import free_port_range

from .harness.before_tree import BeforeTree
from .harness.replayer import Replay, brought_in, replay, wasted_starts
from .harness.report import Report
from .harness.swapd_run import RunningSwapd
from .harness.trace_files import (
    Request,
    merged,
    read_models,
    read_trace,
    swapd_config,
    trace_names,
    trace_path,
    warm,
    warm_env,
)

GIB = 1024**3
# The traces whose total wait must fall to 0.6x the older tree's: the ones collation can help.
COLLATED = ("a_agent_pingpong", "c_openwebui_task")


@dataclass(frozen=True)
class Figures:
    swaps: int
    total: float
    p50: float
    p95: float
    p99: float
    worst: float
    wasted: int
    failed: int

    @staticmethod
    def of(runs: list[Replay]) -> Figures:
        """One tree's figures over its rounds (every round's requests, swaps summed)."""
        waits = sorted(a.wait for run in runs for a in run.answers)
        cuts = statistics.quantiles(waits, n=100, method="inclusive") if len(waits) > 1 else []
        p = (lambda q: cuts[q - 1]) if cuts else (lambda q: waits[0])
        return Figures(
            swaps=sum(brought_in(run.swaps) for run in runs),
            total=sum(waits),
            p50=statistics.median(waits),
            p95=p(95),
            p99=p(99),
            worst=waits[-1],
            wasted=sum(len(wasted_starts(run.swaps, run.answers)) for run in runs),
            failed=sum(1 for run in runs for a in run.answers if a.status != 200),
        )

    def row(self, name: str) -> str:
        times = (self.total, self.p50, self.p95, self.p99, self.worst)
        cells = " ".join(f"{t:8.2f}" for t in times)
        return f"  {name:8s} {self.swaps:5d} {cells} {self.wasted:6d} {self.failed:6d}"


HEADER = "  tree     swaps    total      p50      p95      p99      max wasted failed"


def gpu_env(base: dict[str, str], mem: str) -> dict[str, str]:
    """One fake GPU of its own for each swapd (the sleep presets check its memory), its
    processes' memory declared in `mem`."""
    gpus = json.dumps([{"name": "Fake 0", "total_bytes": 80 * GIB}])
    fake = {"SWAPD_GPU_BACKEND": "fake", "SWAPD_FAKE_GPUS": gpus}
    return base | fake | {"SWAPD_FAKE_GPU_MEM_DIR": mem, "SWAPD_FAKE_GPU_SCOPE": mem}


async def _side_by_side(
    stacks: dict[str, RunningSwapd], trace: list[Request], scale: float
) -> list[Replay]:
    return await asyncio.gather(*(replay(s.url, trace, scale) for s in stacks.values()))


def run_round(name: str, args: argparse.Namespace, before: BeforeTree | None) -> dict[str, Replay]:
    """Both trees on one trace, at once, each a fresh swapd with its own stand-ins."""
    trace = read_trace(name)
    models = read_models()
    with contextlib.ExitStack() as running:
        stacks = {}
        trees = ["current"] + (["warm"] if args.warm else []) + (["before"] if before else [])
        for tree in trees:
            config = swapd_config(trace, models, args.scale, free_port_range(len(models)))
            mem = running.enter_context(tempfile.TemporaryDirectory(prefix="swapd-bench-gpu-"))
            if tree == "before":
                assert before is not None
                env = gpu_env(before.env(), mem)
            else:
                config = merged(config, args.new_config)
                env = gpu_env(dict(os.environ), mem)
            if tree == "warm":
                config = warm(config, models)
                env |= warm_env(mem, args.scale)
            swapd = RunningSwapd(yaml.safe_dump(config), env=env, start_timeout=60)
            stacks[tree] = running.enter_context(swapd)
        runs = asyncio.run(_side_by_side(stacks, trace, args.scale))
    return dict(zip(stacks, runs, strict=True))


def run_trace(
    name: str, args: argparse.Namespace, before: BeforeTree | None
) -> tuple[dict[str, Figures], float, dict[str, list[dict[str, Any]]]]:
    """`--rounds` rounds of a trace: the figures per tree, the trace's largest swap-in, and each
    tree's rounds as they went (every swap record, every request's times, the wasted starts)."""
    rounds = [run_round(name, args, before) for _ in range(args.rounds)]
    trees = list(rounds[0])
    figures = {tree: Figures.of([r[tree] for r in rounds]) for tree in trees}
    logs: dict[str, list[dict[str, Any]]] = {tree: [] for tree in trees}
    for number, by_tree in enumerate(rounds, start=1):
        for tree, run in by_tree.items():
            for answer in run.answers:
                if answer.status != 200:
                    index, error = answer.request.index, answer.error
                    print(f"  {tree}, round {number}: request {index}: {answer.status} {error}")
            wasted = wasted_starts(run.swaps, run.answers)
            for rec in wasted:
                where = f"{rec['kind']} of {rec['model']} (swap record {rec['id']})"
                print(f"  {tree}, round {number}: wasted {where}")
            logs[tree].append(
                {
                    "wasted": [rec["id"] for rec in wasted],
                    "swaps": sorted(run.swaps.values(), key=lambda r: r["id"]),
                    "answers": [a.log() for a in run.answers],
                }
            )
    models = read_models()
    swap_in = max(models[r.model].swap_in() for r in read_trace(name)) * args.scale
    return figures, swap_in, logs


def judge(
    name: str, figures: dict[str, Figures], swap_in: float, max_wait: float, report: Report
) -> None:
    now = figures["current"]
    report.check("wasted", now.wasted, label=name)
    report.check("p99", now.p99 - (max_wait + swap_in), label=name)
    warmed = figures.get("warm")
    if warmed is not None:
        report.check("wasted", warmed.wasted, label=f"{name}, warm")
        report.check("p99", warmed.p99 - (max_wait + swap_in), label=f"{name}, warm")
    before = figures.get("before")
    if before is None:
        return

    def ratio(tree: Figures) -> float:
        return tree.total / before.total if before.total else (1.0 if not tree.total else 99.0)

    if name in COLLATED:
        report.check("collated", ratio(warmed or now), label=name)
    report.check("no_worse", ratio(now), label=name)
    if warmed is not None:
        report.check("no_worse", ratio(warmed), label=f"{name}, warm")


def main(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks trace_replay", description=__doc__)
    parser.add_argument("--before", metavar="REF", help="an older commit to replay beside this")
    parser.add_argument("--scale", type=float, default=1.0, help="every duration times this")
    parser.add_argument("--rounds", type=int, default=1, help="replays of each trace, summed")
    parser.add_argument("--traces", default=",".join(trace_names()), help="comma-separated")
    parser.add_argument("--new-config", default="{}", help="YAML added to this tree's config")
    parser.add_argument("--warm", action="store_true", help="also this tree with `sleep: cuda`")
    parser.add_argument("--max-wait", type=float, default=5.0, help="seconds (the p99 target)")
    args = parser.parse_args(argv)
    args.new_config = yaml.safe_load(args.new_config) or {}
    names = [n for n in args.traces.split(",") if n]
    unknown = [n for n in names if not trace_path(n).is_file()]
    if unknown or not isinstance(args.new_config, dict):
        print(f"no trace {unknown} (known: {trace_names()}), or --new-config not a mapping")
        return 2
    with contextlib.ExitStack() as stack:
        before = stack.enter_context(BeforeTree(args.before)) if args.before else None
        if before is not None:
            print(f"before: {args.before} ({before.commit}) from {before.pythonpath}")
        print(f"scale {args.scale:g}; waits in seconds")
        table: dict[str, dict[str, Any]] = {}
        for trace in names:
            name = trace_path(trace).stem
            figures, swap_in, logs = run_trace(trace, args, before)
            count = len(read_trace(trace)) * args.rounds
            print(f"{name} ({count} requests, largest swap-in {swap_in:.2f} s)")
            print(HEADER)
            for tree, fig in figures.items():
                print(fig.row(tree))
            judge(name, figures, swap_in, args.max_wait, report)
            table[name] = {tree: vars(fig) for tree, fig in figures.items()}
            report.figure(name, table[name] | {"swap_in": swap_in})
            report.figure(f"{name}_rounds", logs)
    print()
    print(markdown(table), end="")
    report.figure("scale", args.scale)
    report.figure("rounds", args.rounds)
    report.figure("before", args.before or "")
    return 0


def markdown(table: dict[str, dict[str, Any]]) -> str:
    """The run's figures as a Markdown table (for HISTORY.md and reports)."""
    lines = [
        "| trace | tree | swaps | total wait | p50 | p95 | p99 | max | wasted | failed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, trees in table.items():
        for tree, f in trees.items():
            cells = [f"{f[k]:.2f}" for k in ("total", "p50", "p95", "p99", "worst")]
            row = [name, tree, str(f["swaps"]), *cells, str(f["wasted"]), str(f["failed"])]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
