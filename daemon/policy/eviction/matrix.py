"""llama-swap's matrix (`routing.router.use: matrix`, or the legacy `matrix:`): the target runs in
the cheapest set that holds it, and the running models outside that set stop
(`matrix_solver.solve`; the set language is compiled at load time by `config/floor/matrix_dsl.py`).

A target that no set names "can only run alone", the matrix's stand-in for the implicit group, so
there, as for the implicit group of `groups.py`, a running model on disjoint `gpus` keeps running
(`gpu_sets.Overlap`); a target some set names follows the matrix exactly.
"""

from __future__ import annotations

from collections.abc import Mapping

from ....ipc.states import ModelState
from ...config import MatrixConfig, ModelConfig
from .contract import BY_SETS, Ask, Decision, Room, Terms
from .gpu_sets import Overlap
from .matrix_solver import named, solve
from .preemption import make_room


class Matrix:
    def __init__(self, matrix: MatrixConfig, canonical: Mapping[str, str] | None = None) -> None:
        self.matrix = matrix
        self.named = named(matrix)
        self.overlap = Overlap(canonical)

    def terms(self, target: ModelConfig) -> Terms:
        return BY_SETS

    def decide(self, ask: Ask, room: Room) -> Decision:
        target = ask.target
        # An asleep model holds no room the sets count: the solver keeps sets with awake ones.
        awake = frozenset(m for m, o in room.occupants.items() if o.state != ModelState.ASLEEP)
        stop = solve(target.id, awake, self.matrix).evict
        if target.id not in self.named:
            stop = frozenset(
                m for m in stop if not self.overlap.disjoint(target, room.occupants[m].model)
            )
        return make_room(stop, ask, room)
