"""`GET /api/metrics/activity` and `GET /api/metrics/stats`, as llama-swap answers them
(its `parseActivityQuery`, `ListActivity`, `ActivityStats`): the same parameters, defaults,
sort keys, validation messages (each a 400) and response shapes."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...ipc.activity import ActivityRecord

DEFAULT_LIMIT = 25

# llama-swap's sort keys (the UI's column ids) and the record field each sorts by.
SORT_KEYS: dict[str, Any] = {
    "id": lambda r: r.id,
    "time": lambda r: r.timestamp,
    "model": lambda r: r.model,
    "req_path": lambda r: r.req_path,
    "resp_status_code": lambda r: r.resp_status_code,
    "resp_content_type": lambda r: r.resp_content_type,
    "cached": lambda r: r.tokens.cache_tokens,
    "prompt": lambda r: r.tokens.input_tokens,
    "generated": lambda r: r.tokens.output_tokens,
    "drafted": lambda r: r.tokens.draft_tokens,
    "prompt_speed": lambda r: r.tokens.prompt_per_second,
    "gen_speed": lambda r: r.tokens.tokens_per_second,
    "duration": lambda r: r.duration_ms,
}


class QueryError(ValueError):
    """A bad parameter: its message is the 400's."""


def _first(pairs: Sequence[tuple[str, str]], name: str) -> str:
    return next((v for k, v in pairs if k == name), "").strip()


def _time(pairs: Sequence[tuple[str, str]], name: str) -> float | None:
    raw = _first(pairs, name)
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None or "T" not in raw.upper():
        raise QueryError(f"invalid '{name}' timestamp, use RFC3339 format")
    return parsed.timestamp()


def _id(pairs: Sequence[tuple[str, str]], name: str) -> int:
    raw = _first(pairs, name)
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise QueryError(f"{name} must be >= 1")
    return value


@dataclass(frozen=True, slots=True)
class ActivityQuery:
    """The parameters of one `GET /api/metrics/activity`, validated."""

    models: tuple[str, ...]
    start: float | None
    end: float | None
    min_id: int
    max_id: int
    limit: int
    page: int
    sort: str
    order: str


def parse_query(pairs: Sequence[tuple[str, str]]) -> ActivityQuery:
    """llama-swap's `parseActivityQuery`: defaults, and a QueryError with its message."""
    models = tuple(v.strip() for k, v in pairs if k == "model" and v.strip())
    start, end = _time(pairs, "start"), _time(pairs, "end")
    if start is not None and end is not None and start > end:
        raise QueryError("start must be before end")
    min_id, max_id = _id(pairs, "min_id"), _id(pairs, "max_id")
    if min_id and max_id and min_id > max_id:
        raise QueryError("min_id must be <= max_id")
    limit = DEFAULT_LIMIT
    if raw := _first(pairs, "limit"):
        try:
            limit = int(raw)
        except ValueError:
            raise QueryError("invalid limit") from None
        if not 0 < limit < 1000:
            raise QueryError("limit must be between 1 and 999")
    page = 1
    if raw := _first(pairs, "page"):
        try:
            page = int(raw)
        except ValueError:
            page = 0
        if page < 1:
            raise QueryError("page must be >= 1")
    sort = _first(pairs, "sort") or "id"
    if sort not in SORT_KEYS:
        raise QueryError("invalid sort column")
    order = _first(pairs, "order").lower() or "desc"
    if order not in ("asc", "desc"):
        raise QueryError("order must be asc or desc")
    return ActivityQuery(models, start, end, min_id, max_id, limit, page, sort, order)


def page_of(rows: list[Any], total: int, query: ActivityQuery) -> dict[str, Any]:
    return {
        "data": rows,
        "page": query.page,
        "limit": query.limit,
        "total": total,
        "total_pages": math.ceil(total / query.limit) if total else 0,
    }


def list_activity(
    records: Iterable[ActivityRecord], pairs: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    q = parse_query(pairs)
    models, start, end, min_id, max_id = q.models, q.start, q.end, q.min_id, q.max_id
    limit, page, sort, order = q.limit, q.page, q.sort, q.order
    rows = [
        r
        for r in records
        if (not models or r.model in models)
        and (start is None or r.timestamp >= start)
        and (end is None or r.timestamp <= end)
        and (not min_id or r.id >= min_id)
        and (not max_id or r.id <= max_id)
    ]
    key = SORT_KEYS[sort]
    # A secondary id order keeps pages stable where the sort column has equal values.
    rows.sort(key=lambda r: (key(r), r.id), reverse=order == "desc")
    return page_of(rows[(page - 1) * limit : page * limit], len(rows), q)


def stats(records: Iterable[ActivityRecord], model: str) -> dict[str, Any]:
    model = model.strip()
    rows = [r for r in records if not model or r.model == model]
    return stats_of(
        len(rows),
        sum(max(0, r.tokens.input_tokens) for r in rows),
        sum(max(0, r.tokens.output_tokens) for r in rows),
        sum(max(0, r.tokens.cache_tokens) for r in rows),
        [r.tokens.prompt_per_second for r in rows if r.tokens.prompt_per_second > 0],
        [r.tokens.tokens_per_second for r in rows if r.tokens.tokens_per_second > 0],
    )


def stats_of(
    requests: int,
    input_tokens: int,
    output_tokens: int,
    cache_tokens: int,
    prompt_speeds: list[float],
    gen_speeds: list[float],
) -> dict[str, Any]:
    return {
        "total_requests": requests,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "total_cache_tokens": cache_tokens,
        "prompt_histogram": histogram(prompt_speeds),
        "gen_histogram": histogram(gen_speeds),
    }


def _percentile(ordered: list[float], p: float) -> float:
    if len(ordered) == 1:
        return ordered[0]
    rank = p / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def histogram(values: list[float]) -> dict[str, Any] | None:
    """llama-swap's `calculateHistogramData`: 5..20 bins by Sturges' rule, p50/p95/p99."""
    if not values:
        return None
    ordered = sorted(values)
    low, high = ordered[0], ordered[-1]
    shape = {
        "min": low,
        "max": high,
        "p50": _percentile(ordered, 50),
        "p95": _percentile(ordered, 95),
        "p99": _percentile(ordered, 99),
    }
    if low == high:
        return {"bins": [len(values)], "binSize": 0.0, **shape}
    count = min(20, max(5, math.ceil(math.log2(len(values))) + 1))
    size = (high - low) / count
    bins = [0] * count
    for value in values:
        bins[min(int((value - low) // size), count - 1)] += 1
    return {"bins": bins, "binSize": size, **shape}
