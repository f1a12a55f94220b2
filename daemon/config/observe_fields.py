"""The `ui` and `performance` sections, as llama-swap reads them: the session headers its web UI
shows (trimmed, repeats dropped case-insensitively, llama-swap's default when none is left),
and the sampler's switch and interval (a Go duration, at least 5 s)."""

from __future__ import annotations

import re
from typing import Any

from . import model as c
from . import shape
from .issues import Report, describe
from .typed import Converter

# Go's `time.ParseDuration`: a sequence of decimal numbers with units, or a bare 0.
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def go_duration(text: str) -> float | None:
    """Seconds of a Go duration string ("5s", "1m30s", "1.5h"), None when it is not one."""
    text = text.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    if not body:
        return None
    total, end = 0.0, 0
    for match in _PART.finditer(body):
        if match.start() != end:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        end = match.end()
    return sign * total if end == len(body) else None


def session_headers(top: shape.Top, typed: Converter) -> tuple[str, ...]:
    activity = top.ui.activity if top.ui is not None else None
    if activity is None or activity.session_id is None:
        return c.DEFAULT_SESSION_HEADERS
    seen: set[str] = set()
    names: list[str] = []
    for _, name in typed.indexed(("ui", "activity", "session_id"), activity.session_id):
        name = name.strip()
        if name and name.lower() not in seen:
            seen.add(name.lower())
            names.append(name)
    return tuple(names)


def performance(top: shape.Top, report: Report) -> tuple[bool, float]:
    """(disabled, every in seconds)."""
    spec = top.performance
    if spec is None:
        return False, c.DEFAULT_PERFORMANCE_EVERY
    every = _every(spec.every, report)
    return bool(spec.disabled), every


def _every(raw: Any, report: Report) -> float:
    where = ("performance", "every")
    if raw is None:
        return c.DEFAULT_PERFORMANCE_EVERY
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        report.error(where, f"expected a duration such as 5s or 1m, got {describe(raw)}")
        return c.DEFAULT_PERFORMANCE_EVERY
    # Go's YAML decoder reads a bare integer into a Duration as nanoseconds.
    seconds = raw * 1e-9 if isinstance(raw, int) else go_duration(raw)
    if seconds is None:
        report.error(where, f"expected a duration such as 5s or 1m, got {describe(raw)}")
        return c.DEFAULT_PERFORMANCE_EVERY
    if seconds == 0:
        return c.DEFAULT_PERFORMANCE_EVERY  # llama-swap: a zero interval is the default
    if seconds < c.DEFAULT_PERFORMANCE_EVERY:
        report.error(
            where, f"every must be at least 5s, got {raw if isinstance(raw, str) else f'{raw}ns'}"
        )
        return c.DEFAULT_PERFORMANCE_EVERY
    return seconds
