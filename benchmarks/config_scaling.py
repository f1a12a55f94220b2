"""How `check-config`'s loading time grows with the size of a config, for the shapes that were slow.

For each shape, the config is loaded at size N and at 4N (best of --rounds); linear growth gives a
ratio of about 4, quadratic 16. shlex splitting one long quoted word is measured beside them as the
reference for "quadratic" (the loader refuses a command over 128 KiB before shlex sees it).
Target (benchmarks/targets.py): the worst shape's growth for 4x the size.
"""

from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Callable

from swapd.daemon.config.loader import ConfigError, load_config_text

from .harness.report import Report


def _load(text: str) -> None:
    try:
        load_config_text(text, environ={})
    except ConfigError:
        pass


SHAPES: dict[str, Callable[[int], str]] = {
    "long plain cmd": lambda n: f"models:\n  m:\n    cmd: srv --port ${{PORT}} {'x ' * (n // 2)}\n",
    "long quoted word (refused)": lambda n: (
        f"models:\n  m:\n    cmd: \"srv --port ${{PORT}} '{'x' * (n * 4)}'\"\n"
    ),
    "unknown macros, one a line": lambda n: (
        "models:\n  m:\n    cmd: |\n      srv --port ${PORT}\n"
        + "".join(f"      ${{nope{i}}}\n" for i in range(n // 16))
    ),
    "long description": lambda n: (
        f"models:\n  m:\n    cmd: srv --port ${{PORT}}\n    description: {'d' * n}\n"
    ),
    "many models": lambda n: (
        "models:\n" + "".join(f"  m{i}:\n    cmd: srv --port ${{PORT}}\n" for i in range(n // 40))
    ),
}


def best(run: Callable[[], None], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks config_scaling", description=__doc__)
    parser.add_argument("--size", type=int, default=100_000, help="N, in characters")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    n, rounds = args.size, args.rounds

    def word(size: int) -> Callable[[], None]:
        return lambda: shlex.split(f"'{'x' * size}'")

    reference = best(word(4 * n // 4), rounds) / best(word(n // 4), rounds)
    print(f"reference: shlex on one quoted word, {n // 4} -> {n} chars: x{reference:.1f}")
    worst = 0.0
    for name, make in SHAPES.items():
        small, large = make(n), make(4 * n)
        ratio = best(lambda large=large: _load(large), rounds) / best(
            lambda small=small: _load(small), rounds
        )
        worst = max(worst, ratio)
        print(f"{name:30} {len(small):>9} -> {len(large):>9} chars: x{ratio:.1f}")
        report.figure(name, ratio)
    report.figure("reference (shlex, quadratic)", reference)
    report.check("growth", worst)
    return 0
