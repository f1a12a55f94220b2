"""The one place an eviction policy is chosen for a config (at load and at every reload).

Adding a policy: a module beside this one with a class that keeps `contract.EvictionPolicy`'s
contract, and its line here.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...config import Config
from .contract import EvictionPolicy
from .gpu_sets import GpuSets
from .groups import Groups
from .matrix import Matrix
from .memory import ByMemory
from .one_at_a_time import OneAtATime


def choose(
    config: Config,
    *,
    canonical_gpus: Mapping[str, str] | None = None,
    by_memory: bool = False,
) -> EvictionPolicy:
    """`canonical_gpus` maps each spelling of a GPU in the config (index or UUID) to one id per
    device (`gpu.canonical_gpu_ids`; without it an index and a UUID never compare equal, so sets
    written in different forms count as overlapping). `by_memory`: a GPU inventory is there to
    place `gpus: auto` models by memory (without one they get every GPU, as models without
    `gpus`)."""
    policy: EvictionPolicy
    if config.router == "matrix" and config.matrix is not None:
        policy = Matrix(config.matrix, canonical_gpus)
    elif config.groups:
        policy = Groups(config, canonical_gpus)
    elif any(m.gpus is not None for m in config.models.values()):
        policy = GpuSets(canonical_gpus)
    else:
        policy = OneAtATime()
    if by_memory and any(m.gpus_auto for m in config.models.values()):
        policy = ByMemory(config, policy)
    return policy
