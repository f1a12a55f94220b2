"""The alias rule, written once: a requested name is a model id, or else an alias of a model.

As in llama-swap, an id always wins over another model's alias of the same text, and when two
models claim one alias the first one (in config order) keeps it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")


def name_index(models: Iterable[tuple[str, Sequence[str], T]]) -> dict[str, T]:
    """Every name (ids and aliases) -> its model, for `(id, aliases, model)` in config order."""
    items = list(models)
    index: dict[str, T] = {}
    for _, aliases, model in items:
        for alias in aliases:
            index.setdefault(alias, model)
    for model_id, _, model in items:
        index[model_id] = model
    return index


def resolve(name: str, models: Iterable[tuple[str, Sequence[str], T]]) -> T | None:
    """The model `name` names, by the same rule as `name_index`, without building the index."""
    items = list(models)
    for model_id, _, model in items:
        if model_id == name:
            return model
    for _, aliases, model in items:
        if name in aliases:
            return model
    return None
