"""The eviction policy: which running models must stop before a target model may start.

A pure function of (target, running, config); the scheduler calls it and does the stopping. Two
policies combine (docs/swapping.md explains them to users):

* groups (`eviction_groups`): llama-swap's rules, unchanged, for a target in a configured group;
* GPUs (`eviction_gpus`): for a target in the implicit `(default)` group, a running model that
  the group rule would evict keeps running when its GPU set and the target's are disjoint.

With `routing.router.use: matrix` the matrix swapper (`eviction_matrix`) replaces the group rule.
A target that no set names "can only run alone", the matrix's stand-in for the implicit group,
so there too a running model on disjoint GPUs keeps running; a target some set names follows the
matrix exactly.

Why only the implicit group: its swap+exclusive settings are llama-swap's stand-in for "every model
needs the whole machine". `gpus` states what a model really needs, so it refines that stand-in.
A configured group is the operator's explicit word and keeps llama-swap's meaning exactly. With no
`gpus` anywhere every set is "all GPUs", every pair overlaps, and the result is llama-swap's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ..config import Config
from .eviction_gpus import gpu_set, gpus_overlap
from .eviction_groups import group_evicts, membership_of, memberships
from .eviction_matrix import named, solve


def evict_for(
    target: str,
    running: Collection[str],
    config: Config,
    *,
    canonical_gpus: Mapping[str, str] | None = None,
) -> frozenset[str]:
    """The running model ids that must stop before `target` starts (never `target` itself).

    `target` is a model id (an alias is resolved too); `running` holds ids of models that are
    not stopped, plus the targets of swaps in progress. A running id the config does not know (a
    model removed by a reload while it still runs) is treated as a model without `gpus` in the
    implicit group. `canonical_gpus` maps each config spelling of a GPU (index or UUID) to one id
    per device (`gpu.canonical_gpu_ids`); without it an index and a UUID never compare equal, and
    sets written in different forms count as overlapping.

    Raises KeyError when `target` is not a configured model.
    """
    model = config.resolve(target)
    if model is None:
        raise KeyError(f"unknown model {target!r}")
    target_gpus = gpu_set(model, canonical_gpus)
    # An empty map (no NVML inventory) resolves nothing.
    resolved = bool(canonical_gpus)

    def disjoint(other: str) -> bool:
        other_gpus = gpu_set(config.models.get(other), canonical_gpus)
        return not gpus_overlap(target_gpus, other_gpus, resolved=resolved)

    if config.router == "matrix" and config.matrix is not None:
        chosen = solve(model.id, frozenset(running) - {model.id}, config.matrix).evict
        if model.id in named(config.matrix):
            return chosen
        return frozenset(other for other in chosen if not disjoint(other))

    groups = memberships(config)
    target_group = membership_of(model.id, groups)
    evict: set[str] = set()
    for other in running:
        if other == model.id or other in evict:
            continue
        if not group_evicts(target_group, membership_of(other, groups)):
            continue
        if target_group.implicit and disjoint(other):
            continue
        evict.add(other)
    return frozenset(evict)
