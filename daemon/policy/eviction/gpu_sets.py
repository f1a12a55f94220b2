"""Disjoint `gpus` sets: a model stops only the running models that may share a GPU with it.

The policy for a config with no groups and no matrix where some model names its GPUs: every model
is in the implicit group (one at a time), refined by `gpus`: a running model whose GPU set and the
target's are disjoint keeps running. The groups and matrix policies apply the same refinement to
the targets they leave to the implicit group (`Overlap`).

A model's `gpus` is a tuple of indices ("0", "2") or UUIDs ("GPU-8f2c...") as written in the
config. No `gpus` means every GPU, so such a model overlaps every other; `gpus: []` means none (a
CPU-only model: the daemon sets CUDA_VISIBLE_DEVICES to ""), which overlaps nothing. Without a map
from spec to device (`canonical`, built from the NVML inventory by `gpu.canonical_gpu_ids`), an
index and a UUID cannot be compared: two sets written in different forms then count as
overlapping, so a config that mixes forms never lets two models share a GPU by accident.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...config import ModelConfig
from .contract import BY_SETS, Ask, Decision, Room, Terms
from .preemption import make_room


def normalize_gpu(spec: str) -> str:
    """One spelling per device: indices without leading zeros, UUIDs case-folded."""
    text = spec.strip()
    if text.isdecimal():
        return str(int(text))
    return text.casefold()


def gpu_set(
    model: ModelConfig | None, canonical: Mapping[str, str] | None = None
) -> frozenset[str] | None:
    """The model's GPUs in canonical form; None = every GPU (no `gpus`, or not a known model)."""
    if model is None or model.gpus is None:
        return None
    ids = (normalize_gpu(item) for item in model.gpus)
    if canonical is not None:
        return frozenset(canonical.get(item, item) for item in ids)
    return frozenset(ids)


def _is_index(item: str) -> bool:
    return item.isdecimal()


def gpus_overlap(a: frozenset[str] | None, b: frozenset[str] | None, *, resolved: bool) -> bool:
    """True when the two sets may share a GPU.

    `resolved` says the sets went through a canonical map, so equal strings are the only way two
    items name one device; otherwise an index set and a UUID set are assumed to overlap.
    """
    if (a is not None and not a) or (b is not None and not b):
        return False  # `gpus: []` runs on no GPU (CUDA_VISIBLE_DEVICES="")
    if a is None or b is None:
        return True
    if a & b:
        return True
    if resolved:
        return False
    forms = {_is_index(item) for item in a | b}
    return len(forms) > 1


class Overlap:
    """Whether two models may share a GPU, with each spelling of a GPU mapped to one id
    (`canonical`, from the NVML inventory: `gpu.canonical_gpu_ids`; empty: nothing resolves)."""

    def __init__(self, canonical: Mapping[str, str] | None) -> None:
        self.canonical = canonical
        self.resolved = bool(canonical)

    def disjoint(self, target: ModelConfig, other: ModelConfig | None) -> bool:
        """`other` None (a reload removed it while it runs): it holds every GPU, for all we know."""
        return not gpus_overlap(
            gpu_set(target, self.canonical),
            gpu_set(other, self.canonical),
            resolved=self.resolved,
        )


class GpuSets:
    def __init__(self, canonical: Mapping[str, str] | None = None) -> None:
        self.overlap = Overlap(canonical)

    def terms(self, target: ModelConfig) -> Terms:
        return BY_SETS

    def decide(self, ask: Ask, room: Room) -> Decision:
        stop = frozenset(
            o.id for o in room.occupants.values() if not self.overlap.disjoint(ask.target, o.model)
        )
        return make_room(stop, ask, room)
