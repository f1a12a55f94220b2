"""Resident memory of an idle swapd: circusd + daemon + proxy, no model loaded.

Starts the real `swapd run` (a two-model config, nothing loaded), waits until the proxy answers
/health plus --settle seconds, samples every swapd process with psutil five times, and prints RSS
(what the target is about) and USS (memory no other process shares) per process and in total.
Target (benchmarks/targets.py): the total RSS (with one proxy process). Then it loads both models
in turn, unloads them, and measures once more: an idle swapd that has swapped should not have
grown.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request

import psutil

from tests.support.ports import free_port_range

from .harness.report import Report
from .harness.swapd_run import RunningSwapd

CONFIG = """\
healthCheckTimeout: 15
startPort: {start}
models:
  idle-a:
    cmd: {python} -m swapd.daemon.cli.demo_server --port ${{PORT}} --model ${{MODEL_ID}}
    proxy: http://127.0.0.1:${{PORT}}
  idle-b:
    cmd: {python} -m swapd.daemon.cli.demo_server --port ${{PORT}} --model ${{MODEL_ID}}
    proxy: http://127.0.0.1:${{PORT}}
"""
MB = 1e6


def role(proc: psutil.Process, circusd_pid: int) -> str | None:
    if proc.pid == circusd_pid:
        return "circusd"
    cmdline = " ".join(proc.cmdline())
    if "swapd.daemon.main" in cmdline:
        return "daemon"
    if "swapd.proxy" in cmdline:
        return "proxy"
    if "circusd-stats" in cmdline or "circus.stats" in cmdline:
        return "circusd-stats"
    return None  # a model


def sample(circusd_pid: int) -> dict[str, tuple[float, float]]:
    """role -> (rss, uss) in bytes, summed over processes of that role."""
    root = psutil.Process(circusd_pid)
    result: dict[str, tuple[float, float]] = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            name = role(proc, circusd_pid)
            if name is None:
                continue
            info = proc.memory_full_info()
        except psutil.Error:
            continue
        rss, uss = result.get(name, (0.0, 0.0))
        result[name] = (rss + info.rss, uss + info.uss)
    return result


def measure(circusd_pid: int, rounds: int = 5) -> dict[str, tuple[float, float]]:
    samples = []
    for _ in range(rounds):
        samples.append(sample(circusd_pid))
        time.sleep(0.2)
    roles = sorted({r for s in samples for r in s})
    return {
        r: (
            statistics.median(s.get(r, (0, 0))[0] for s in samples),
            statistics.median(s.get(r, (0, 0))[1] for s in samples),
        )
        for r in roles
    }


def show(title: str, figures: dict[str, tuple[float, float]]) -> float:
    print(title)
    for name, (rss, uss) in figures.items():
        print(f"  {name:14s} RSS {rss / MB:6.1f} MB   USS {uss / MB:6.1f} MB")
    total_rss = sum(rss for rss, _ in figures.values())
    total_uss = sum(uss for _, uss in figures.values())
    print(f"  {'total':14s} RSS {total_rss / MB:6.1f} MB   USS {total_uss / MB:6.1f} MB")
    return total_rss


def chat(url: str, model: str) -> None:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 200


def main(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks idle_memory", description=__doc__)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds idle before sampling")
    parser.add_argument("--proxy-processes", type=int, default=1)
    args = parser.parse_args(argv)
    config = CONFIG.format(start=free_port_range(2), python=sys.executable)
    extra = ("--proxy-processes", str(args.proxy_processes))
    with RunningSwapd(config, extra_args=extra) as swapd:
        time.sleep(args.settle)  # idle is the point: let start-up garbage settle
        total = show("idle, nothing loaded ever:", measure(swapd.pid))
        chat(swapd.url, "idle-a")
        chat(swapd.url, "idle-b")
        unload = [
            sys.executable,
            "-m",
            "swapd.daemon.cli",
            "unload",
            "--run-dir",
            str(swapd.run_dir),
        ]

        subprocess.run(unload, check=True, capture_output=True, timeout=60)
        time.sleep(args.settle)
        after = show("idle again after loading two models and unloading:", measure(swapd.pid))
        code = swapd.stop()
    print(f"swapd exit code {code}")
    print(f"total RSS {total / MB:.1f} MB idle, {after / MB:.1f} MB after swapping")
    report.figure("total_rss_mb", {"idle": total / MB, "after_swapping": after / MB})
    report.check("total", total / MB)
    return 0
