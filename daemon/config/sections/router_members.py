"""The models whose neighbours the router decides: a configured group's members, or the models
the matrix's sets name. `gpus: auto` (placement by memory) does not apply to them.

Why a config error rather than a composition: placement picks GPUs and evictions by measured
memory alone, and a group or matrix picks what may run together with no regard to memory; the two
answers can disagree (placement keeps a model the matrix would stop, or the matrix allows a set
that does not fit), and no single rule honours both without surprising one side. The operator
says which one decides by listing the model in a group/set or giving it `gpus: auto`, not both.
docs/configuration.md, "gpus: auto with groups and the matrix", says so for users.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import model as c
from ..floor.issues import Report
from ..floor.matrix_dsl import DslError, leaves, named, parse
from .gpu_fields import grouped_models


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _router(data: Mapping[str, Any]) -> dict[str, Any]:
    return _dict(_dict(data.get("routing")).get("router"))


def grouped(data: Mapping[str, Any]) -> set[str]:
    """Members of a configured group, legacy `groups:` or `routing.router.settings.groups` (the
    raw document, before it is checked)."""
    settings = _dict(_router(data).get("settings"))
    return grouped_models(data.get("groups")) | grouped_models(settings.get("groups"))


def _raw_matrix(data: Mapping[str, Any]) -> dict[str, Any]:
    router = _router(data)
    if router.get("use") == "matrix":
        return _dict(_dict(router.get("settings")).get("matrix"))
    return _dict(data.get("matrix"))


def matrix_named(data: Mapping[str, Any]) -> set[str]:
    """The model ids the matrix in effect names in its sets, read from the raw document (sets
    that do not parse name nothing here; the matrix's own check reports them)."""
    matrix = _raw_matrix(data)
    vars_ = {k: v for k, v in _dict(matrix.get("vars")).items() if isinstance(v, str)}
    found: set[str] = set()
    for text in _dict(matrix.get("sets")).values():
        if not isinstance(text, str):
            continue
        try:
            found |= {vars_.get(ident, ident) for ident in leaves(parse(text))}
        except DslError:
            continue
    return found


def check_auto_in_matrix(
    models: Mapping[str, c.ModelConfig], matrix: c.MatrixConfig | None, report: Report
) -> None:
    if matrix is None:
        return
    for model_id in sorted(named(matrix.sets)):
        model = models.get(model_id)
        if model is not None and model.gpus_auto:
            report.error(
                ("models", model_id, "gpus"),
                "gpus: auto places a model by memory, but this model is in a set of the matrix, "
                "whose sets decide what runs beside it; remove it from the sets or list its gpus",
            )
