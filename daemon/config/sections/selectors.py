"""`selectors`: names that pick one of their targets per request (`warm`, `pin`, `spillover`),
checked with llama-swap's rules and messages (`validateSelectors` in its
internal/config/selectors.go). The proxy does the picking (proxy/routing/selectors.py)."""

from __future__ import annotations

from collections.abc import Mapping

from .. import shape
from ..floor.issues import Report
from ..floor.matrix_dsl import can_contain_all
from ..model import GroupConfig, MatrixConfig, PeerConfig, RouteSelector

STRATEGIES = ("warm", "pin", "spillover")


def _peer_name(target: str, peers: Mapping[str, PeerConfig]) -> str | None:
    """A peer model's `peer/model` name, from that name or a bare name one peer offers."""
    owners = [p for p in peers.values() if target in p.models]
    for peer in peers.values():
        for model in peer.models:
            if target == f"{peer.id}/{model}":
                return target
    return f"{owners[0].id}/{target}" if len(owners) == 1 else None


def read(
    specs: Mapping[str, shape.Selector] | None,
    names: Mapping[str, str],
    peers: Mapping[str, PeerConfig],
    groups: Mapping[str, GroupConfig],
    matrix: MatrixConfig | None,
    report: Report,
) -> dict[str, RouteSelector]:
    """`names`: every local model id and alias -> its model id."""
    result: dict[str, RouteSelector] = {}
    for sid, spec in (specs or {}).items():
        path = ("selectors", sid)
        problem = _problem(sid, spec, names, specs or {}, peers, groups, matrix)
        if problem is not None:
            where, message = problem
            report.error((*path, *where), message, key=not where)
            continue
        targets = tuple(names.get(t) or _peer_name(t, peers) or t for t in spec.targets or ())
        result[sid] = RouteSelector(
            id=sid,
            strategy=spec.strategy or "",
            targets=targets,
            spillover=spec.settings.spillover if spec.settings and spec.settings.spillover else 1,
            name=spec.name,
            description=spec.description,
            unlisted=bool(spec.unlisted),
            metadata=dict(spec.metadata or {}),
        )
    return result


def _problem(
    sid: str,
    spec: shape.Selector,
    names: Mapping[str, str],
    specs: Mapping[str, shape.Selector],
    peers: Mapping[str, PeerConfig],
    groups: Mapping[str, GroupConfig],
    matrix: MatrixConfig | None,
) -> tuple[tuple[str | int, ...], str] | None:
    if not sid.strip():
        return (), "selectors: selector names cannot be empty"
    if sid in names:
        kind = "model ID" if names[sid] == sid else "model alias"
        return (), f'selectors.{sid}: name conflicts with {kind} "{sid}"'
    strategy = spec.strategy or ""
    if not strategy:
        return (), f"selectors.{sid}.strategy is required"
    if strategy not in STRATEGIES:
        return ("strategy",), (
            f'selectors.{sid}.strategy: unknown strategy "{strategy}" (valid: warm, pin, spillover)'
        )
    targets = spec.targets or ()
    if not targets:
        return (), f"selectors.{sid}.targets must contain at least one entry"
    resolved: list[str] = []
    local: list[str] = []
    for i, target in enumerate(targets):
        where = ("targets", i)
        if target in specs:
            return where, (
                f'selectors.{sid}.targets[{i}] references selector "{target}"; '
                "selector chaining is not supported"
            )
        model_id = names.get(target)
        peer = _peer_name(target, peers) if model_id is None else None
        if model_id is None and peer is None:
            return where, f'selectors.{sid}.targets[{i}] references unknown model "{target}"'
        if strategy == "warm" and model_id is None:
            return where, (
                f'selectors.{sid}.targets[{i}] must resolve to a local model for strategy "warm"'
            )
        resolved.append(model_id or peer or target)
        if model_id is not None:
            local.append(model_id)
    if strategy != "spillover":
        return None
    if spec.settings is not None and spec.settings.spillover is not None:
        if spec.settings.spillover < 1:
            return ("settings", "spillover"), f"selectors.{sid}.settings.spillover must be >= 1"
    duplicates = [t for t in resolved if resolved.count(t) > 1]
    if duplicates:
        return ("targets",), (
            f'selectors.{sid}.targets contains duplicate resolved model "{duplicates[0]}"'
        )
    return _coexist(sid, local, groups, matrix)


def _coexist(
    sid: str, local: list[str], groups: Mapping[str, GroupConfig], matrix: MatrixConfig | None
) -> tuple[tuple[str | int, ...], str] | None:
    if len(local) <= 1:
        return None
    if matrix is not None:
        if can_contain_all(matrix.sets, frozenset(local)):
            return None
        return ("targets",), (
            f"selectors.{sid}.targets must all appear together in one expanded matrix set"
        )
    group_of = {m: g for g, group in groups.items() for m in group.members}
    first = group_of.get(local[0])
    if first is None:
        return ("targets",), f'selectors.{sid} target "{local[0]}" is not in a routing group'
    if groups[first].swap:
        return (
            "targets",
        ), f"selectors.{sid} spillover targets must share a group with swap: false"
    if any(group_of.get(t) != first for t in local[1:]):
        return ("targets",), f"selectors.{sid} spillover targets must share one routing group"
    return None
