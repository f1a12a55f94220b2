"""What a benchmark hands back: its figures and its targets' verdicts, printed the same way for
every benchmark ("met" or "MISSED") and written to a results file.

A benchmark calls `report.check(key, value)` for each target it judges (the bound is read from
benchmarks/targets.py, never written in the benchmark) and `report.figure(name, value)` for the
figures worth keeping; `python -m benchmarks` prints the verdicts at the end and writes
benchmarks/results/<name>-<date>.json.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..targets import Benchmark

RESULTS = Path(__file__).resolve().parent.parent / "results"
MET, MISSED = "met", "MISSED"


@dataclass(frozen=True)
class Verdict:
    key: str
    target: str  # the target in words, from the table
    value: float
    unit: str
    met: bool
    label: str = ""  # which reading, when a target is judged more than once (a layout, a row)

    @property
    def word(self) -> str:
        return MET if self.met else MISSED

    def line(self) -> str:
        unit = "" if self.unit in ("", "x", "%") else f" {self.unit}"
        label = f" [{self.label}]" if self.label else ""
        return f"{self.word:6s}  {self.key}{label}: {self.target}: measured {self.value:.4g}{unit}"


class Report:
    def __init__(self, bench: Benchmark, argv: list[str]) -> None:
        self.bench = bench
        self.argv = argv
        self.verdicts: list[Verdict] = []
        self.figures: dict[str, Any] = {}
        self.started = datetime.datetime.now(datetime.UTC)

    def check(self, key: str, value: float, label: str = "") -> bool:
        """Judge `value` by the target `key` of this benchmark; printed now and in the summary."""
        target = self.bench.targets_by_key[key]
        verdict = Verdict(key, target.text, value, target.unit, target.met(value), label)
        self.verdicts.append(verdict)
        print(f"  target {verdict.line()}")
        return verdict.met

    def figure(self, name: str, value: Any) -> None:
        """A figure for the results file (numbers, lists of rounds, small dicts)."""
        self.figures[name] = value

    @property
    def missed(self) -> bool:
        return any(not v.met for v in self.verdicts)

    def summary(self) -> str:
        if not self.verdicts:
            return f"{self.bench.name}: no target judged ({self.bench.note or 'figures only'})"
        lines = [f"{self.bench.name}: targets"]
        lines += [f"  {v.line()}" for v in self.verdicts]
        return "\n".join(lines)

    def write(self, folder: Path = RESULTS) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        stamp = self.started.strftime("%Y-%m-%dT%H%M%SZ")
        path = folder / f"{self.bench.name}-{stamp}.json"
        doc = {
            "benchmark": self.bench.name,
            "argv": self.argv,
            "started": self.started.isoformat(timespec="seconds"),
            "ended": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": machine(),
            "verdicts": [{**asdict(v), "verdict": v.word} for v in self.verdicts],
            "figures": self.figures,
        }
        path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        return path


def machine() -> dict[str, Any]:
    """What the figures were taken on: a run's figures mean little without its load."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=RESULTS.parent,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "host": platform.node(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "commit": commit,
    }
