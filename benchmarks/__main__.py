"""`python -m benchmarks`: one command for every benchmark.

    python -m benchmarks --list                  the benchmarks, what each needs, its targets
    python -m benchmarks --targets               benchmarks/README.md's table of targets
    python -m benchmarks NAME [--quick] [ARGS]   run one; --quick: its shortest run (targets.py)

ARGS go to the benchmark (`python -m benchmarks NAME --help`). At the end every target judged is
printed as "met" or "MISSED", and the figures are written to benchmarks/results/NAME-DATE.json
(`--results DIR` elsewhere), whose path is printed. Exit status: 0 all met, 1 a target MISSED,
2 the benchmark could not run (a program it needs is missing, bad arguments).
"""

from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path

from .harness.report import RESULTS, Report
from .targets import BENCHMARKS, BY_NAME, markdown

INSTALL = {"wrk": "wrk", "nginx": "nginx-light", "valgrind": "valgrind"}


def listing() -> str:
    lines = []
    for bench in BENCHMARKS:
        needs = f" (needs {', '.join(bench.needs)})" if bench.needs else ""
        lines.append(f"{bench.name}{needs}")
        lines.append(f"    {bench.what}")
        lines.append(f"    --quick: {' '.join(bench.quick)}")
        for target in bench.targets:
            lines.append(f"    target {target.key}: {target.text}")
        if not bench.targets:
            lines.append(f"    no target: {bench.note}")
    return "\n".join(lines)


def run(name: str, args: list[str], results: Path) -> int:
    bench = BY_NAME.get(name)
    if bench is None:
        print(f"no benchmark {name!r}; `python -m benchmarks --list` lists them", file=sys.stderr)
        return 2
    missing = [tool for tool in bench.needs if shutil.which(tool) is None]
    if missing:
        packages = " ".join(INSTALL.get(tool, tool) for tool in missing)
        print(f"{name} needs {', '.join(missing)} (Debian: apt-get install {packages})")
        return 2
    if "--quick" in args:
        args = [*bench.quick, *(a for a in args if a != "--quick")]
    module = importlib.import_module(f".{name}", __package__)
    report = Report(bench, args)
    print(f"{name} {' '.join(args)}".rstrip(), flush=True)
    code = module.main(args, report)
    if code == 2:
        return 2
    print()
    print(report.summary())
    print(f"results: {report.write(results)}")
    return 1 if report.missed or code else 0


def main(argv: list[str]) -> int:
    results = RESULTS
    if "--results" in argv:
        at = argv.index("--results")
        results = Path(argv[at + 1])
        argv = argv[:at] + argv[at + 2 :]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    if argv[0] == "--list":
        print(listing())
        return 0
    if argv[0] == "--targets":
        print(markdown(), end="")
        return 0
    return run(argv[0], argv[1:], results)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
