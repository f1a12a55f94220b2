"""The `ui` and `performance` sections, as llama-swap reads them: the session headers its web UI
shows (trimmed, repeats dropped case-insensitively, llama-swap's default when none is left),
and the sampler's switch and interval (a Go duration, at least 5 s); and swapd's `learn`."""

from __future__ import annotations

from ....ipc.durations import go_duration
from .. import model as c
from .. import shape
from ..floor.issues import Report, describe
from ..floor.typed import Converter


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


def learning(top: shape.Top) -> tuple[bool, bool]:
    """(learn.enabled, learn.prefetch): both on by default; prefetch needs the learning."""
    spec = top.learn
    if spec is None:
        return True, True
    enabled = spec.enabled is not False
    return enabled, enabled and spec.prefetch is not False


def _every(raw: int | str | None, report: Report) -> float:
    where = ("performance", "every")
    if raw is None:
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
