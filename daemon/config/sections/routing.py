"""`routing:` (llama-swap's canonical form) and the legacy top-level `groups:` / `matrix:`,
normalised into one router choice, its groups or matrix, and the FIFO priorities.

The rules and messages are llama-swap's (`internal/config/load.go`): the legacy keys and a
`routing.router` block together are refused; `use: matrix` needs `settings.matrix`; an unknown
router or scheduler is named with the valid ones; top-level `groups` and `matrix` together are
refused, while under `routing.router.settings` both may be written and `use` picks one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from .. import model as c
from .. import shape
from ..floor.issues import Report
from ..floor.matrix_dsl import DslError, compile_sets
from ..floor.yaml_nodes import Path
from .top_fields import CrossCheck

ROUTERS = ("group", "matrix")
SCHEDULERS = ("fifo",)
VAR_KEY_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")

MIGRATE = (
    "config uses both the legacy top-level 'matrix'/'groups' keys and the new 'routing.router' "
    "block; please migrate the top-level keys into 'routing.router' and remove them"
)


class Routing(msgspec.Struct, frozen=True):
    router: str = "group"
    groups: dict[str, c.GroupConfig] = msgspec.field(default_factory=dict)
    matrix: c.MatrixConfig | None = None
    priority: dict[str, int] = msgspec.field(default_factory=dict)


def normalise(
    top: shape.Top,
    cross: CrossCheck,
    models: Mapping[str, Any],
    resolve: Mapping[str, str],
    report: Report,
) -> Routing:
    """`models`: every model id the file defines; `resolve`: every id and alias -> model id."""
    routing = top.routing or shape.Routing()
    router = routing.router or shape.Router()
    settings = router.settings or shape.RouterSettings()
    legacy = top.matrix is not None or bool(top.groups)
    modern = router.use not in (None, "") or settings.matrix is not None or bool(settings.groups)
    result = Routing(priority=_priority(routing, resolve, report))
    if legacy and modern:
        where: Path = ("groups",) if top.groups else ("matrix",)
        report.error(where, MIGRATE, key=True)
        return result
    if legacy:
        if top.matrix is not None and top.groups:
            report.error(("matrix",), "config cannot use both 'groups' and 'matrix'", key=True)
            return result
        if top.matrix is not None:
            return _with_matrix(result, top.matrix, ("matrix",), models, report)
        return msgspec.structs.replace(result, groups=cross.groups(top.groups))
    base: Path = ("routing", "router")
    use = router.use or "group"
    if use == "matrix":
        if settings.matrix is None:
            report.error(
                (*base, "use"),
                "routing.router.use is 'matrix' but routing.router.settings.matrix is not set",
            )
            return result
        return _with_matrix(result, settings.matrix, (*base, "settings", "matrix"), models, report)
    if use != "group":
        report.error(
            (*base, "use"),
            f'routing.router.use: unknown router "{use}" (valid: {", ".join(ROUTERS)})',
        )
        return result
    groups = cross.groups(settings.groups, (*base, "settings", "groups"))
    return msgspec.structs.replace(result, groups=groups)


def _priority(routing: shape.Routing, resolve: Mapping[str, str], report: Report) -> dict[str, int]:
    scheduler = routing.scheduler or shape.SchedulerSpec()
    base: Path = ("routing", "scheduler")
    use = scheduler.use or "fifo"
    if use not in SCHEDULERS:
        report.error(
            (*base, "use"),
            f'routing.scheduler.use: unknown scheduler "{use}" (valid: {", ".join(SCHEDULERS)})',
        )
    fifo = scheduler.settings.fifo if scheduler.settings else None
    priority: dict[str, int] = {}
    for name, value in ((fifo.priority if fifo else None) or {}).items():
        model_id = resolve.get(name)
        if model_id is None:
            report.error(
                (*base, "settings", "fifo", "priority", name),
                f'routing.scheduler.settings.fifo.priority references unknown model "{name}"',
                key=True,
            )
        else:
            priority[model_id] = value
    return priority


def _with_matrix(
    result: Routing, spec: shape.Matrix, path: Path, models: Mapping[str, Any], report: Report
) -> Routing:
    vars_ = dict(spec.vars or {})
    ok = True
    for key, model_id in vars_.items():
        if not key or len(key) > 32 or not set(key) <= VAR_KEY_CHARS:
            report.error(
                (*path, "vars", key),
                f"matrix: var key \"{key}\" must contain only alphanumeric, '-' or '.' "
                "characters and be 1-32 characters long",
                key=True,
            )
            ok = False
        elif model_id not in models:
            report.error(
                (*path, "vars", key),
                f'matrix: var key "{key}" references unknown model "{model_id}"',
            )
            ok = False

    def resolve(ident: str) -> str | None:
        if ident in vars_:
            return vars_[ident]
        return ident if ident in models else None

    costs: dict[str, int] = {}
    for key, cost in (spec.evict_costs or {}).items():
        where = (*path, "evict_costs", key)
        costed = resolve(key)
        if cost <= 0:
            report.error(
                where, f'matrix: evict_cost for "{key}" must be a positive integer, got {cost}'
            )
            ok = False
        elif costed is None:
            report.error(where, f'matrix: evict_costs: unknown var or model "{key}"', key=True)
            ok = False
        else:
            costs[costed] = cost
    try:
        sets = compile_sets(spec.sets or {}, resolve)
    except DslError as error:
        where = (*path, "sets") if error.set_name is None else (*path, "sets", error.set_name)
        report.error(where, f"matrix: {error}")
        return result
    if not ok:
        return result
    matrix = c.MatrixConfig(sets=sets, evict_costs=costs, vars=vars_)
    return msgspec.structs.replace(result, router="matrix", matrix=matrix)
