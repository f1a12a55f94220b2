"""llama-swap's groups: which running models a target's group evicts.

Every model belongs to exactly one group. Models that no configured group names belong to the
implicit group `(default)` (swap and exclusive, never persistent), which is what makes "one model at
a time" llama-swap's default. The rule for one running model R when target T loads is llama-swap's
`groupSwapper.EvictionFor` (shared/reference/llama-swap.md §2.7):

* R is in T's group and that group swaps -> evict R;
* R is in another group, T's group is exclusive and R's group is not persistent -> evict R;
* otherwise R keeps running. So a non-exclusive group leaves every other group running, exclusive
  ones included (llama-swap keeps that quirk for backward compatibility, and so do we).

`gpus` refines the implicit group only (`gpu_sets.Overlap`): a running model that the group rule
would evict keeps running when its GPU set and the target's are disjoint. Its swap+exclusive
settings are llama-swap's stand-in for "every model needs the whole machine", and `gpus` states
what a model really needs. A configured group is the operator's explicit word and keeps
llama-swap's meaning exactly. With no `gpus` anywhere every set is "all GPUs", every pair
overlaps, and the result is llama-swap's. A running model the config no longer has (a reload
removed it while it runs) is in the implicit group, without `gpus`.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from ...config import Config, GroupConfig, ModelConfig
from .contract import BY_SETS, Ask, Decision, Room, Terms
from .gpu_sets import Overlap
from .preemption import make_room

IMPLICIT_GROUP = "(default)"
IMPLICIT_GROUP_CONFIG = GroupConfig(members=(), swap=True, exclusive=True, persistent=False)


class Membership(msgspec.Struct, frozen=True):
    """The group a model belongs to, by name, with its settings."""

    name: str
    config: GroupConfig

    @property
    def implicit(self) -> bool:
        return self.name == IMPLICIT_GROUP


IMPLICIT = Membership(IMPLICIT_GROUP, IMPLICIT_GROUP_CONFIG)


def memberships(config: Config) -> Mapping[str, Membership]:
    """Model id -> its explicit group. Models absent from the map are in the implicit group.

    A group the loader already named `(default)` (llama-swap's loader materialises it) is the
    implicit group, whatever settings it carries.
    """
    result: dict[str, Membership] = {}
    for name, group in config.groups.items():
        membership = Membership(name, IMPLICIT_GROUP_CONFIG if name == IMPLICIT_GROUP else group)
        for member in group.members:
            result[member] = membership
    return result


def membership_of(model_id: str, groups: Mapping[str, Membership]) -> Membership:
    return groups.get(model_id, IMPLICIT)


def group_evicts(target: Membership, running: Membership) -> bool:
    """llama-swap's rule: does loading a member of `target` stop a running member of `running`?"""
    if running.name == target.name:
        return target.config.swap
    return target.config.exclusive and not running.config.persistent


class Groups:
    def __init__(self, config: Config, canonical: Mapping[str, str] | None = None) -> None:
        self.groups = memberships(config)
        self.overlap = Overlap(canonical)

    def terms(self, target: ModelConfig) -> Terms:
        return BY_SETS

    def decide(self, ask: Ask, room: Room) -> Decision:
        target = ask.target
        group = membership_of(target.id, self.groups)
        stop = frozenset(
            o.id
            for o in room.occupants.values()
            if group_evicts(group, membership_of(o.id, self.groups))
            and not (group.implicit and self.overlap.disjoint(target, o.model))
        )
        return make_room(stop, ask, room)
