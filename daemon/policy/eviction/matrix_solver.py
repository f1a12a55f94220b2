"""llama-swap's matrix solver: the cheapest eviction that lets the target run in one of the sets.

A set's expression describes the combinations of models that may run together (`&` all of, `|`
one of, `+name` another set); see `config/floor/matrix_dsl.py`. For target T and the running
models R (llama-swap's `Program.Solve`, shared/reference/llama-swap.md §2.7):

* T already running -> evict nothing;
* otherwise every combination that contains T costs the sum of `evict_costs` (default 1) of the
  running models outside it; the cheapest wins, ties go to the set visited first (sets in the
  order written, each after the sets it references), then to the combination written first;
* evict the running models outside the winner; a T that no set names evicts everything.

Combinations are never fully expanded: each expression is projected onto T and R, so two choices
that differ only in models that are not running are one state (llama-swap does the same).
"""

from __future__ import annotations

from collections.abc import Collection

import msgspec

from ...config import MatrixConfig, Projection, models_named

DEFAULT_COST = 1


class Decision(msgspec.Struct, frozen=True):
    evict: frozenset[str]
    set_name: str | None = None  # None: T is running already, or no set names it
    cost: int = 0


def named(matrix: MatrixConfig) -> frozenset[str]:
    """Every model some set names (a model outside them all can only run alone)."""
    return models_named(matrix.sets)


def solve(target: str, running: Collection[str], matrix: MatrixConfig) -> Decision:
    """Which running models must stop for `target` to start (never `target` itself)."""
    running = frozenset(running)
    if target in running:
        return Decision(frozenset())
    projection = Projection(matrix.sets, running | {target})
    best: tuple[int, str, frozenset[str]] | None = None
    for matrix_set in matrix.sets:
        for state in projection.states(matrix_set.expr):
            if target not in state:
                continue
            cost = sum(matrix.evict_costs.get(m, DEFAULT_COST) for m in running - state)
            if best is None or cost < best[0]:
                best = (cost, matrix_set.name, state)
    if best is None:
        return Decision(running)
    cost, name, state = best
    return Decision(running - state, name, cost)
