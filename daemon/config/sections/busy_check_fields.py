"""`busyCheck`: how swapd asks a model's own server whether it is working (opt-in, per model).

Written as a preset name (`busyCheck: comfyui`), as a preset with some settings changed
(`busyCheck: {preset: comfyui, swapWait: 1800}`), or in full (`path` and `count`). Read here into
a `BusyCheck`; the daemon polls it (`machinery/busy_poller.py`), reads each answer
(`policy/busy_answer.py`) and keeps the last reading (`policy/busy_board.py`), which the TTL and the
eviction policies read (`policy/eviction/preemption.py`). Without the key a model has no check and
nothing changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..floor.issues import Report, describe
from ..floor.presets import Presets
from ..floor.schema import known_keys
from ..floor.yaml_nodes import Path
from ..model import BusyCheck, BusyCount

KEY = "busyCheck"
MIN_INTERVAL = 0.1


PRESETS: dict[str, BusyCheck] = {
    # ComfyUI: GET /api/queue -> {"queue_running": [[number, prompt_id, ...]], "queue_pending": []}
    "comfyui": BusyCheck(
        path="/api/queue",
        counts=(
            BusyCount(label="running job", json="queue_running"),
            BusyCount(label="pending job", json="queue_pending"),
        ),
        preset="comfyui",
    ),
    # llama.cpp's llama-server: GET /slots -> [{"id": 0, "is_processing": true, ...}, ...]
    "llamacpp": BusyCheck(
        path="/slots",
        counts=(BusyCount(label="processing slot", json="", where="is_processing"),),
        preset="llamacpp",
    ),
    # vLLM: GET /metrics (Prometheus text) -> vllm:num_requests_running{...} 1.0
    "vllm": BusyCheck(
        path="/metrics",
        counts=(BusyCount(label="running request", metric="vllm:num_requests_running"),),
        preset="vllm",
    ),
}

WRITTEN = Presets(PRESETS, ("preset", "path", "count", "interval", "timeout", "swapWait"))
_COUNT_KEYS = ("json", "where", "metric", "label")


def read_busy_check(
    value: str | dict[str, Any] | None, where: Path, report: Report
) -> BusyCheck | None:
    """The model's `busyCheck` (None when it has none, or its type was wrong: `typed.py` said
    so); problems go to `report`."""
    if value is None:
        return None
    if isinstance(value, str):
        return WRITTEN.named(value, where, report)
    ok, base = WRITTEN.base(value, where, report)
    if not ok:
        return None
    check_path = value.get("path", base.path if base else None)
    if check_path is None:
        report.error(where, "needs a path (or a preset)", key=True)
        return None
    if not isinstance(check_path, str) or not check_path.startswith("/"):
        report.error(
            (*where, "path"), f"expected a path starting with '/', got {describe(check_path)}"
        )
        return None
    counts = _counts(value.get("count"), (*where, "count"), report)
    if counts is None:
        if value.get("count") is not None:
            return None
        if base is None:
            report.error(where, "needs count (what makes the model busy) or a preset", key=True)
            return None
        counts = base.counts
    start = base or BusyCheck(path=check_path, counts=counts)
    interval = _seconds(value, where, "interval", report, MIN_INTERVAL, start.interval)
    timeout = _seconds(value, where, "timeout", report, 0.001, start.timeout)
    swap_wait = _seconds(value, where, "swapWait", report, 0.0, start.swap_wait)
    if interval is None or timeout is None or swap_wait is None:
        return None
    return BusyCheck(
        path=check_path,
        counts=counts,
        interval=interval,
        timeout=timeout,
        swap_wait=swap_wait,
        preset=base.preset if base else None,
    )


def _counts(value: Any, where: Path, report: Report) -> tuple[BusyCount, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        report.error(
            where, f"expected a list of counts (json or metric, label), got {describe(value)}"
        )
        return None
    counts: list[BusyCount] = []
    for index, item in enumerate(value):
        at = (*where, index)
        if not isinstance(item, dict):
            report.error(
                at, f"expected a mapping with json or metric, and label, got {describe(item)}"
            )
            continue
        if not known_keys(item, _COUNT_KEYS, at, report):
            continue
        texts = {k: item.get(k) for k in _COUNT_KEYS}
        wrong = [k for k, v in texts.items() if v is not None and not isinstance(v, str)]
        for key in wrong:
            report.error((*at, key), f"expected text, got {describe(texts[key])}")
        if wrong:
            continue
        if (texts["json"] is None) == (texts["metric"] is None):
            report.error(at, "needs exactly one of json (a path in a JSON answer) or metric")
            continue
        if texts["where"] is not None and texts["json"] is None:
            report.error((*at, "where"), "applies to a json count only")
            continue
        if not texts["label"]:
            report.error(at, "needs a label (what one of them is, such as 'running job')")
            continue
        counts.append(
            BusyCount(
                label=texts["label"],
                json=texts["json"],
                where=texts["where"],
                metric=texts["metric"],
            )
        )
    if len(counts) != len(value):
        return None
    if len({count.metric is None for count in counts}) > 1:
        report.error(where, "mixes json and metric counts; one answer is either JSON or metrics")
        return None
    return tuple(counts)


def _seconds(
    mapping: Mapping[str, Any],
    where: Path,
    key: str,
    report: Report,
    minimum: float,
    default: float,
) -> float | None:
    value = mapping.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        report.error((*where, key), f"expected seconds (a number), got {describe(value)}")
        return None
    if value < minimum or value == float("inf"):
        report.error((*where, key), f"must be at least {minimum:g} seconds and finite, got {value}")
        return None
    return float(value)
