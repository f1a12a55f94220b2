"""Do two models' GPU sets overlap?

A model's `gpus` is a tuple of indices ("0", "2") or UUIDs ("GPU-8f2c...") as written in the
config. No `gpus` means every GPU, so such a model overlaps every other; `gpus: []` means none (a
CPU-only model: the daemon sets CUDA_VISIBLE_DEVICES to ""), which overlaps nothing. Without a map
from spec to device (`canonical`, built from the NVML inventory by `gpu.canonical_gpu_ids`), an
index and a UUID cannot be compared: two sets written in different forms then count as
overlapping, so a config that mixes forms never lets two models share a GPU by accident.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..config import ModelConfig


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
