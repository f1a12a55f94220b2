"""The settings of GPU placement by memory (docs/gpus.md, "Placement by memory"): `gpus: auto` per
model or at the top level, `gpus: {auto: [GPUs]}` to keep placement to some GPUs, the `vram:` hint,
the top-level `vramMargin`, and how they combine with groups and explicit `gpus`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

import msgspec

from .. import model as c
from .. import shape
from ..floor.issues import Report, describe
from ..floor.yaml_nodes import Path

AUTO = "auto"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
# nvidia-smi's MiB/GiB are binary, and so are K, M, G, T alone; KB, MB, GB, TB are decimal.
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kib": 1024,
    "kb": 1000,
    "m": 1024**2,
    "mib": 1024**2,
    "mb": 1000**2,
    "g": 1024**3,
    "gib": 1024**3,
    "gb": 1000**3,
    "t": 1024**4,
    "tib": 1024**4,
    "tb": 1000**4,
}
_EXPECTED_SIZE = shape.SIZE_WORDS
_EXPECTED_AUTO = shape.AUTO_WORDS
GpuList = Callable[[Any, Path, Report], "tuple[str, ...] | None"]


def auto_wanted(value: Any, auto_default: bool) -> bool:
    """Whether a model's `gpus` value asks for placement by memory (the top level's default
    applies when the model sets no `gpus`)."""
    if isinstance(value, str) and value.strip().casefold() == AUTO:
        return True
    # Any mapping is taken as the `{auto: [...]}` form, so that a wrong one is reported as such.
    if isinstance(value, dict):
        return True
    return value is None and auto_default


def size_of(value: Any, where: Path, report: Report, *, zero: bool = False) -> int | None:
    least = 0 if zero else 1
    if isinstance(value, int) and not isinstance(value, bool) and value >= least:
        return value
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match is not None and match.group(2).casefold() in _UNITS:
            size = int(float(match.group(1)) * _UNITS[match.group(2).casefold()])
            if size >= least:
                return size
    report.error(where, f"expected {_EXPECTED_SIZE}, got {describe(value)}")
    return None


def margin_of(value: int | str | None, where: Path, report: Report) -> int:
    """`vramMargin`: left free on every GPU a placement uses (0 allowed); default 512 MiB."""
    if value is None:
        return c.DEFAULT_VRAM_MARGIN
    size = size_of(value, where, report, zero=True)
    return c.DEFAULT_VRAM_MARGIN if size is None else size


def allowed_of(value: Any, where: Path, report: Report, gpus_of: GpuList) -> tuple[str, ...] | None:
    """The GPU list of `gpus: {auto: [...]}`; None for plain `auto` (or `gpus` left out)."""
    if value is None or (isinstance(value, str) and value.strip().casefold() == AUTO):
        return None
    if not isinstance(value, dict) or list(value) != [AUTO]:
        report.error(where, f"expected {_EXPECTED_AUTO}, got {describe(value)}")
        return None
    listed = value[AUTO]
    if not isinstance(listed, list):
        report.error(
            (*where, AUTO),
            f"expected a list of GPU indices or UUIDs such as [0, 1], got {describe(listed)}",
        )
        return None
    return gpus_of(listed, (*where, AUTO), report)


def vram_of(
    value: int | str | list[Any] | None, where: Path, report: Report
) -> tuple[int, ...] | None:
    """`vram: 24GiB` (one GPU) or `vram: [40GiB, 40GiB]` (bytes on each of its GPUs)."""
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    if not items:
        report.error(where, f"expected {_EXPECTED_SIZE}, or a list of them, got an empty list")
        return None
    sizes = [
        size_of(item, (*where, i) if isinstance(value, list) else where, report)
        for i, item in enumerate(items)
    ]
    if any(s is None for s in sizes):
        return None
    return tuple(s for s in sizes if s is not None)


def check_placement(
    models: Mapping[str, c.ModelConfig],
    raw_models: Mapping[str, Any],
    top_gpus: str | dict[str, Any] | None,
    grouped: Collection[str],
    report: Report,
    gpus_of: GpuList,
) -> dict[str, c.ModelConfig]:
    """`models` with each placed model's allowed GPUs (`gpus_of` reads a `gpus` list, as
    model_fields does). `gpus: auto` on a member of a configured group is an error (the group
    decides what runs with it); `vram` without `gpus: auto` is only a warning (nothing reads it).
    A model's own `gpus: {auto: [...]}` replaces the top level's list; its plain `gpus: auto`
    keeps the top level's list (the GPUs placement may use)."""
    top_allowed = allowed_of(top_gpus, ("gpus",), report, gpus_of)
    result = dict(models)
    for model_id, model in models.items():
        body = raw_models.get(model_id)
        body = body if isinstance(body, dict) else {}
        path = ("models", model_id)
        if model.gpus_auto and model_id in grouped:
            report.error(
                (*path, "gpus"),
                "gpus: auto places a model by memory, but this model is in a group, whose rules "
                "decide what runs beside it; remove it from the group or list its gpus",
            )
        if body.get("vram") is not None and not model.gpus_auto:
            report.warn(
                (*path, "vram"),
                "vram is used only with gpus: auto (as the footprint until one is measured)",
            )
        if model.gpus_auto:
            own = body.get("gpus")
            allowed = allowed_of(own, (*path, "gpus"), report, gpus_of)
            allowed = allowed if isinstance(own, dict) else top_allowed
            if allowed is not None:
                result[model_id] = msgspec.structs.replace(model, gpus_allowed=allowed)
    return result


def grouped_models(groups: Any) -> set[str]:
    """The models a raw `groups` section lists (before it is checked)."""
    result: set[str] = set()
    if not isinstance(groups, dict):
        return result
    for name, group in groups.items():
        if name == "(default)" or not isinstance(group, dict):
            continue
        members = group.get("members")
        if isinstance(members, list):
            result.update(m for m in members if isinstance(m, str))
    return result


def gpus_of(value: Any, where: Path, report: Report) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        report.error(
            where,
            "expected auto or a list of GPU indices or UUIDs such as [0, 1], "
            f"got {describe(value)}",
        )
        return None
    if not value:
        report.error(where, "lists no GPU; leave gpus out to use every GPU")
        return None
    gpus: list[str] = []
    for index, item in enumerate(value):
        if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
            gpu = str(item)
        elif isinstance(item, str) and item.strip() and "," not in item:
            gpu = item.strip()
        else:
            report.error(
                (*where, index), f"expected a GPU index (0, 1, ...) or UUID, got {describe(item)}"
            )
            continue
        if gpu in gpus:
            report.error((*where, index), f"GPU {gpu} is listed twice")
            continue
        gpus.append(gpu)
    return tuple(gpus)
