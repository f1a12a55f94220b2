"""benchmarks/gpu_placement_check.py is for a real GPU host; its `--fake` dry run here (the fake
GPU backend standing for NVML, each model declaring its bytes instead of allocating them through
benchmarks/harness/gpu_holder.py) keeps the script working: the real swapd, learned footprints
against what was allocated, and the exit -> free timings."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.processes


def benchmark(results: Path, *argv: str) -> list[str]:
    """`python -m benchmarks ...` from the repository, its results file in `results`."""
    return [sys.executable, "-m", "benchmarks", "--results", str(results), *argv]


def test_gpu_placement_check_dry_run_prints_footprints_and_release_times(tmp_path: Path) -> None:
    result = subprocess.run(
        benchmark(tmp_path, "gpu_placement_check", "--fake", "--mib", "256,512", "--timeout", "60"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for name, mib in (("m0-256mib", 256), ("m1-512mib", 512)):
        # Allocated, learned, the difference: the fake holds exactly what it declared.
        rows = re.findall(rf"^{name}\s+{mib} MiB\s+{mib} MiB\s+0 MiB\s+GPU-\S+ / ", out, re.M)
        assert len(rows) == 2, out  # first start, then measured
        timing = re.search(rf"^{name}\s+(\d+) ms\s+(\d+) ms$", out, re.M)
        assert timing is not None, out  # exit -> NVML lists no pid, exit -> used back
    assert "footprint 0.2 GiB on GPU 0 (placed by memory, from: measured)" in out


def test_the_sleep_benchmarks_gpu_mode_dry_run_prints_each_presets_residual(
    tmp_path: Path,
) -> None:
    """benchmarks/sleep_swap.py --gpu is for a GPU host; `--fake` runs the stand-ins on the
    fake GPU: each preset is loaded, put to sleep through swapd, and woken."""
    result = subprocess.run(
        benchmark(tmp_path, "sleep_swap", "--gpu", "--fake"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for preset, awake, asleep in (
        ("vllm", "8.00", "0.50"),
        ("vllm-level2", "8.00", "0.50"),
        ("comfyui", "6.00", "0.25"),
    ):
        row = rf"^  {re.escape(preset)}  awake\s+{awake} GiB, asleep\s+{asleep} GiB .* wake "
        assert re.search(row, out, re.M), out
