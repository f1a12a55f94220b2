"""A `busyCheck`'s rule over one answer of the upstream: how many jobs it reports, and in words.

Pure: the answer's bytes in, a `Reading` out. A JSON rule walks a dotted path and counts a list's
items (or takes a number); a Prometheus rule sums a metric's samples (prometheus-client's parser).
An answer the rule cannot read is a failed reading, which the board counts as idle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from ..config import BusyCheck, BusyCount


@dataclass(frozen=True)
class Reading:
    """What one poll found. `parts` are the non-zero counts with their labels."""

    jobs: int = 0
    parts: tuple[tuple[str, int], ...] = ()
    error: str = ""  # the poll failed: counted as idle

    @property
    def busy(self) -> bool:
        return not self.error and self.jobs > 0

    def words(self) -> str:
        """`upstream reports 1 running job, 2 pending jobs` (or `... no running job`)."""
        if not self.parts:
            return "upstream reports nothing running"
        said = ", ".join(f"{n} {label}{'' if n == 1 else 's'}" for label, n in self.parts)
        return f"upstream reports {said}"


class RuleError(Exception):
    pass


def evaluate(check: BusyCheck, body: bytes) -> Reading:
    """The reading of `body`, the upstream's answer (status 200) to `check.path`."""
    try:
        if any(count.metric is not None for count in check.counts):
            values = _metrics(body, check.counts)
        else:
            values = _json_counts(body, check.counts)
    except RuleError as exc:
        return Reading(error=str(exc))
    parts = tuple((c.label, n) for c, n in zip(check.counts, values, strict=True) if n > 0)
    return Reading(jobs=sum(values), parts=parts)


def failed(error: str) -> Reading:
    return Reading(error=error)


def _json_counts(body: bytes, counts: tuple[BusyCount, ...]) -> list[int]:
    try:
        answer = msgspec.json.decode(body)
    except msgspec.DecodeError:
        raise RuleError("the answer is not JSON") from None
    return [_json_count(answer, count) for count in counts]


def _json_count(answer: Any, count: BusyCount) -> int:
    assert count.json is not None
    value = answer
    name = count.json or "the answer"
    for key in (k for k in count.json.split(".") if k):
        if not isinstance(value, dict) or key not in value:
            raise RuleError(f"no {count.json!r} in the answer")
        value = value[key]
    if isinstance(value, bool):
        raise RuleError(f"{name} is true/false, not a list or a number")
    if isinstance(value, int | float):
        return max(0, math.ceil(value))
    if not isinstance(value, list):
        raise RuleError(f"{name} is not a list or a number")
    if count.where is None:
        return len(value)
    return sum(1 for item in value if _true_at(item, count.where, name))


def _true_at(item: Any, where: str, name: str) -> bool:
    value = item
    for key in (k for k in where.split(".") if k):
        if not isinstance(value, dict):
            raise RuleError(f"an item of {name} is not a mapping")
        value = value.get(key)
    return bool(value)


def _metrics(body: bytes, counts: tuple[BusyCount, ...]) -> list[int]:
    wanted = {c.metric for c in counts if c.metric is not None}
    sums: dict[str, float] = {}
    try:
        text = body.decode("utf-8")
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in wanted:
                    sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    except (UnicodeDecodeError, ValueError, TypeError) as exc:
        raise RuleError(f"the answer is not Prometheus text ({exc})") from None
    values = []
    for count in counts:
        if count.metric is None:
            raise RuleError("a check mixes json and metric counts")
        if count.metric not in sums:
            raise RuleError(f"no {count.metric} in the answer")
        total = sums[count.metric]
        values.append(max(0, math.ceil(total)) if math.isfinite(total) else 0)
    return values
