"""`busyCheck`: how swapd asks a model's own server whether it is working (opt-in, per model).

Written as a preset name (`busyCheck: comfyui`), as a preset with some settings changed
(`busyCheck: {preset: comfyui, swapWait: 1800}`), or in full (`path` and `count`). Read here into
a `BusyCheck`; the daemon polls it (`machinery/busy_poller.py`), reads each answer
(`policy/busy_answer.py`) and keeps the last reading (`policy/busy_board.py`), which the TTL and the
eviction policies read (`policy/eviction/preemption.py`). Without the key a model has no check and
nothing changes.
"""

from __future__ import annotations

from .. import shape
from ..floor.issues import Report
from ..floor.presets import Presets
from ..floor.typed import Converter
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

WRITTEN = Presets(PRESETS, shape.BusyCheckMapping)


def read_busy_check(
    value: str | shape.BusyCheckMapping | None, where: Path, report: Report
) -> BusyCheck | None:
    """The model's `busyCheck` (None when it has none, or after an error), its mapping's keys
    typed by `typed.py`, which reported each wrong one: read in this order, the reading stops at
    the first such key (as at its own first problem)."""
    if value is None:
        return None
    if isinstance(value, str):
        return WRITTEN.named(value, where, report)
    ok, base = WRITTEN.base(value.preset, where, report)
    if not ok or report.typed_wrong((*where, "path")):
        return None
    check_path = value.path if value.path is not None else base.path if base else None
    if check_path is None:
        report.error(where, "needs a path (or a preset)", key=True)
        return None
    if not check_path.startswith("/"):
        report.error((*where, "path"), f"expected a path starting with '/', got {check_path!r}")
        return None
    counts = _counts(value.count, (*where, "count"), report)
    if counts is None:
        if value.count is not None or report.typed_wrong((*where, "count")):
            return None
        if base is None:
            report.error(where, "needs count (what makes the model busy) or a preset", key=True)
            return None
        counts = base.counts
    start = base or BusyCheck(path=check_path, counts=counts)
    interval = _seconds(value.interval, where, "interval", report, MIN_INTERVAL, start.interval)
    timeout = _seconds(value.timeout, where, "timeout", report, 0.001, start.timeout)
    swap_wait = _seconds(value.swap_wait, where, "swapWait", report, 0.0, start.swap_wait)
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


def _counts(
    value: tuple[shape.BusyCountMapping, ...] | None, where: Path, report: Report
) -> tuple[BusyCount, ...] | None:
    if value is None:
        return None
    if not value:
        report.error(where, "expected a list of counts (json or metric, label), got a list")
        return None
    counts: list[BusyCount] = []
    for index, item in Converter(report).indexed(where, value):
        at = (*where, index)
        if report.typed_wrong(at):
            continue
        if (item.json is None) == (item.metric is None):
            report.error(at, "needs exactly one of json (a path in a JSON answer) or metric")
            continue
        if item.where is not None and item.json is None:
            report.error((*at, "where"), "applies to a json count only")
            continue
        if not item.label:
            report.error(at, "needs a label (what one of them is, such as 'running job')")
            continue
        counts.append(
            BusyCount(label=item.label, json=item.json, where=item.where, metric=item.metric)
        )
    if len(counts) != len(value) or report.typed_wrong(where):
        return None
    if len({count.metric is None for count in counts}) > 1:
        report.error(where, "mixes json and metric counts; one answer is either JSON or metrics")
        return None
    return tuple(counts)


def _seconds(
    value: float | None,
    where: Path,
    key: str,
    report: Report,
    minimum: float,
    default: float,
) -> float | None:
    if report.typed_wrong((*where, key)):
        return None
    if value is None:
        return default
    if value != value:
        report.error((*where, key), f"expected seconds (a number), got {value}")
        return None
    if value < minimum or value == float("inf"):
        report.error((*where, key), f"must be at least {minimum:g} seconds and finite, got {value}")
        return None
    return float(value)
