"""One model at a time: a model starts once every other model has stopped.

llama-swap's default, and swapd's for a config with no groups, no matrix and no `gpus`. The
simplest policy, and the one to copy when adding a policy (docs/swapping.md, "Adding a policy").
"""

from __future__ import annotations

from ...config import ModelConfig
from .contract import BY_SETS, Ask, Decision, Room, Terms
from .preemption import make_room


class OneAtATime:
    def terms(self, target: ModelConfig) -> Terms:
        return BY_SETS

    def decide(self, ask: Ask, room: Room) -> Decision:
        return make_room(frozenset(room.occupants), ask, room)
