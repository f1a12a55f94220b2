"""Side-by-side figures that a noisy, shared machine does not decide: each round runs every
configuration once, in an order that rotates from round to round, and a configuration's figure
is the median over rounds of its ratio to the baseline's figure in the same round (a round's
configurations run seconds apart, so what the machine's neighbours do to one they mostly do to
the other). The spread is a bootstrap interval of that median, and an A/A pair (the baseline
run twice) shows what the same method reads between two identical configurations.

Where the processes may run (`place`): `shared` leaves it to the kernel, as a user's machine
would; `pinned` gives the proxy under test a CPU of its own and every other process (the
daemon, circusd, nginx, wrk, the benchmark and its subscriber) the other CPUs, as on a host
with more cores than a 2-CPU test machine has.
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
from collections.abc import Iterable, Sequence

import psutil

LAYOUTS = ("shared", "pinned")
# The CPUs this benchmark may use, read before it pins anything.
ALLOWED = sorted(os.sched_getaffinity(0))


def rotated(names: Sequence[str], round_no: int) -> list[str]:
    """The configurations in this round's order: each goes first once every len(names) rounds,
    so none is always measured right after another one (or on a warmer machine)."""
    k = round_no % len(names)
    return list(names[k:]) + list(names[:k])


def paired(values: Sequence[float], baseline: Sequence[float]) -> list[float]:
    """Each round's value over the baseline's in the same round."""
    if len(values) != len(baseline):
        raise ValueError("paired figures need the same rounds")
    return [v / b for v, b in zip(values, baseline, strict=True)]


def paired_to_both(values: Sequence[float], *baselines: Sequence[float]) -> list[float]:
    """Each round's value over the mean of the baselines' in the same round (the A/A pair's two
    runs together: each round then has two processes' luck on the baseline's side, not one)."""
    if not baselines:
        raise ValueError("no baseline")
    means = [statistics.fmean(round_) for round_ in zip(*baselines, strict=True)]
    return paired(values, means)


def median_interval(
    samples: Sequence[float], *, level: float = 0.9, draws: int = 2000, seed: int = 12
) -> tuple[float, float, float]:
    """(median, low, high): the median and a percentile-bootstrap interval of it at `level`
    (the rounds drawn again with replacement `draws` times; a fixed seed, so one set of rounds
    always gives one interval)."""
    if not samples:
        raise ValueError("no samples")
    rng = random.Random(seed)
    n = len(samples)
    medians = sorted(statistics.median(rng.choices(samples, k=n)) for _ in range(draws))
    cut = (1 - level) / 2
    low = medians[int(cut * (draws - 1))]
    high = medians[int((1 - cut) * (draws - 1))]
    return statistics.median(samples), low, high


def place(layout: str, proxies: Iterable[int], others: Iterable[int]) -> bool:
    """Sets every thread of `proxies` and `others` (and of this process, whose children wrk
    and nginx inherit it) to `layout`'s CPUs; False when `pinned` cannot be had (one CPU)."""
    cpus = ALLOWED
    if layout == "pinned" and len(cpus) < 2:
        return False
    mine, rest = ({cpus[0]}, set(cpus[1:])) if layout == "pinned" else (set(cpus), set(cpus))
    for pid in proxies:
        _set(pid, mine)
    for pid in [*others, os.getpid()]:
        _set(pid, rest)
    return True


def _set(pid: int, cpus: set[int]) -> None:
    # sched_setaffinity on a pid sets its main thread only: each thread is set.
    with contextlib.suppress(psutil.Error):
        for thread in psutil.Process(pid).threads():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(thread.id, cpus)
