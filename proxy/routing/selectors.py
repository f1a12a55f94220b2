"""Selectors: which target a request for a selector goes to (llama-swap's strategies).

* `pin`: the first target.
* `warm`: the first target that is ready, else the first that is starting, else the first.
* `spillover`: among the targets that run (starting or ready; a peer target always counts as
  running), the least busy one that has fewer than `spillover` requests (ties in turn); when all
  are full, the next target in order that is stopped (a cold start); none: 503. Targets being
  drained or stopped are skipped. "Requests" are this proxy process's admitted, unfinished
  requests for the target (its 429 counter), through the selector or not.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from ...ipc.routing_table import RouteSelector
from ...ipc.states import LEAVING_STATES, SERVING_STATES, ModelState
from ..mirror.state import ModelRuntime

_turns = itertools.count()


def choose(selector: RouteSelector, runtimes: Mapping[str, ModelRuntime]) -> str | None:
    """The target's name (a model id or `peer/model`), or None: no spillover target is free."""
    targets = selector.targets
    if selector.strategy == "pin":
        return targets[0]
    states = {t: (runtimes[t].state if t in runtimes else "peer") for t in targets}
    if selector.strategy == "warm":
        for wanted in (ModelState.READY, ModelState.STARTING):
            for target in targets:
                if states[target] == wanted:
                    return target
        return targets[0]
    load = {t: runtimes[t].reserved if t in runtimes else 0 for t in targets}
    free = [t for t in targets if states[t] in (*SERVING_STATES, "peer")]
    free = [t for t in free if load[t] < selector.spillover]
    if free:
        least = min(load[t] for t in free)
        tied = [t for t in free if load[t] == least]
        return tied[next(_turns) % len(tied)]
    for target in targets:
        if states[target] not in (*SERVING_STATES, *LEAVING_STATES, "peer"):
            return target
    return None
