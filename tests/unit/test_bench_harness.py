"""benchmarks/, one harness: every benchmark is a module the command runs the same way, its
targets are benchmarks/targets.py's (the README shows that table), and a verdict is "met" or
"MISSED" only through the harness's report, which writes the figures to a results file."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import __main__ as command
from benchmarks.harness.report import Report
from benchmarks.targets import BENCHMARKS, BY_NAME, Benchmark, Op, Target, markdown
from tests.support.paths import REPO

BENCH = REPO / "benchmarks"
HARNESS = BENCH / "harness"


def test_the_readme_shows_the_table_of_targets() -> None:
    assert markdown() in (BENCH / "README.md").read_text(), (
        "benchmarks/README.md's table differs from targets.py: paste `python -m benchmarks "
        "--targets` into it"
    )


def test_every_benchmark_module_is_in_the_table_and_every_row_has_a_module() -> None:
    modules = {p.stem for p in BENCH.glob("*.py")} - {"__init__", "__main__", "targets"}
    assert modules == set(BY_NAME)
    for bench in BENCHMARKS:
        module = importlib.import_module(f"benchmarks.{bench.name}")
        assert callable(module.main), bench.name
        assert bench.quick, bench.name
        assert len({t.key for t in bench.targets}) == len(bench.targets), bench.name


def test_only_the_harness_says_met_or_missed_and_nothing_patches_sys_path() -> None:
    for path in [*BENCH.glob("*.py"), *HARNESS.glob("*.py")]:
        text = path.read_text()
        assert "sys.path.insert" not in text, path
        if path.name not in ("report.py", "__main__.py"):  # the report, and the command's help
            assert not re.search(r"""["'](met|MISSED|NOT met|TOO SLOW)["']""", text), path


def test_no_harness_module_hides_a_package_from_the_programs_run_by_path() -> None:
    """`python benchmarks/harness/pipeline_floor.py` puts harness/ first on sys.path: a
    `harness/swapd.py` there made `import swapd` find it (the floor never started)."""
    code = (
        "import importlib.util, sys; "
        "print([m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None])"
    )
    stems = [p.stem for p in HARNESS.glob("*.py") if p.stem != "__init__"]
    found = subprocess.run(
        [sys.executable, "-c", code, *stems], cwd="/", capture_output=True, text=True, check=True
    ).stdout.strip()
    assert found == "[]"


def test_every_target_a_benchmark_checks_is_in_the_table() -> None:
    for bench in BENCHMARKS:
        checked = set(
            re.findall(
                r"""report\.check\(\s*["'](\w+)["']""", (BENCH / f"{bench.name}.py").read_text()
            )
        )
        if bench.name == "hostile_clients":  # its rows name their targets (harness/hostile_rows.py)
            rows = (BENCH / "hostile_clients.py").read_text() + (
                HARNESS / "hostile_rows.py"
            ).read_text()
            checked = {key for key in bench.targets_by_key if f'"{key}"' in rows}
            assert checked == set(bench.targets_by_key)
        assert checked <= set(bench.targets_by_key), bench.name
        assert checked == set(bench.targets_by_key) or bench.name == "proxy_pipeline", bench.name


def test_a_verdict_is_judged_by_the_tables_bound_and_written_with_the_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = Benchmark(
        "demo",
        "a demo",
        ("--quick-arg",),
        targets=(
            Target("ratio", "a / b", Op.AT_LEAST, 0.9, "x"),
            Target("extra", "a - b", Op.AT_MOST, 20, "ms"),
            Target("cpu", "idle CPU", Op.UNDER, 5, "%"),
        ),
    )
    report = Report(bench, ["--rounds", "1"])
    assert report.check("ratio", 0.9) and not report.check("extra", 20.5)
    assert not report.check("cpu", 5.0) and report.check("cpu", 4.9, label="row 2")
    report.figure("rounds", [1.0, 2.0])
    printed = capsys.readouterr().out
    assert "target met     ratio: a / b >= 0.9x: measured 0.9" in printed
    assert "target MISSED  extra: a - b <= 20 ms: measured 20.5 ms" in printed
    assert report.missed
    assert "MISSED  cpu: idle CPU < 5%" in report.summary()
    assert "met     cpu [row 2]" in report.summary()
    path = report.write(tmp_path)
    assert path.parent == tmp_path and path.name.startswith("demo-")
    doc = json.loads(path.read_text())
    assert doc["argv"] == ["--rounds", "1"] and doc["figures"] == {"rounds": [1.0, 2.0]}
    assert [v["verdict"] for v in doc["verdicts"]] == ["met", "MISSED", "MISSED", "met"]
    assert doc["machine"]["load_average"]


def test_the_command_lists_runs_and_refuses_the_same_way_for_every_benchmark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert command.main(["--list"]) == 0
    listed = capsys.readouterr().out
    for bench in BENCHMARKS:
        assert f"{bench.name}" in listed and " ".join(bench.quick) in listed
    assert command.main(["no_such_bench"]) == 2
    monkeypatch.setattr(command.shutil, "which", lambda tool: None)
    assert command.main(["proxy_pipeline", "--quick"]) == 2
    assert "apt-get install wrk nginx-light" in capsys.readouterr().out


def test_a_quick_run_prints_the_verdict_and_the_results_file(tmp_path: Path) -> None:
    args = ["--results", str(tmp_path), "config_scaling", "--size", "2000", "--rounds", "1"]
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = result.stdout
    written = list(tmp_path.glob("config_scaling-*.json"))
    assert len(written) == 1, out + result.stderr
    assert f"results: {written[0]}" in out
    verdict = json.loads(written[0].read_text())["verdicts"][0]
    assert f"{verdict['verdict']:6s}  growth:" in out
    assert result.returncode == (0 if verdict["met"] else 1)
