"""`python -m benchmarks trace_replay` on a tiny trace, so the replay machinery cannot rot unseen:
two clients over two stand-ins that evict each other, this tree beside `--before HEAD` (the
older tree unpacked and imported from its own folder), every request answered, the swaps read
from each swap log, none of this tree's starts wasted, the figures in the results file. The
targets' verdicts are not judged here (timing belongs to the benchmark)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = [pytest.mark.processes, pytest.mark.timeout(240)]

TINY = [
    {"at": 0.0, "client": "c1", "model": "task", "kind": "chat", "gen": 0.2},
    {"at": 0.05, "client": "c2", "model": "editor", "kind": "stream", "gen": 0.2},
    {"at": 0.3, "client": "c1", "model": "task", "kind": "chat", "after": True, "think": 0.1},
    {"at": 0.4, "client": "c2", "model": "editor", "kind": "embeddings", "after": True},
]


def test_a_tiny_trace_replays_through_both_trees(tmp_path: Path) -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, check=False)
    if head.returncode != 0:
        pytest.skip("--before needs the repository's history (a git checkout)")
    trace = tmp_path / "tiny.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in TINY))
    argv = ["--results", str(tmp_path), "trace_replay", "--traces", str(trace)]
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", *argv, "--before", "HEAD", "--scale", "0.1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    out = result.stdout + result.stderr
    assert result.returncode in (0, 1), out  # 1: a target missed, which is not this test's
    assert re.search(r"^before: HEAD \(\w+\) from /\S+/pkg$", result.stdout, re.M), out
    (results,) = tmp_path.glob("trace_replay-*.json")
    figures = json.loads(results.read_text())["figures"]["tiny"]
    for tree in ("current", "before"):
        assert figures[tree]["failed"] == 0, out
        # task, then editor at least (collation may serve both of task's first): the swap log
        # was read.
        assert figures[tree]["swaps"] >= 2, out
        assert figures[tree]["total"] > 0, out
    assert figures["current"]["wasted"] == 0, out
    assert "| tiny | current |" in result.stdout, out
