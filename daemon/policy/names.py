"""Where a request's model name becomes a model id: once, as the request enters the daemon
(`Ensure`, `Unload`, the preload hook). Everything after it (the scheduler, the eviction policy,
the effects) takes ids only."""

from __future__ import annotations

from ..config import Config, ModelConfig
from ..errors import ModelNotFound


def resolve(config: Config, name: str) -> ModelConfig:
    """The model `name` names (its id or one of its aliases; ids win, as in llama-swap)."""
    model = config.resolve(name)
    if model is None:
        raise ModelNotFound(f"no local model {name!r}")
    return model


def id_of(config: Config, name: str) -> str:
    """The id `name` names, for an unload: a configured model's, or `name` itself (a model a
    reload removed may still run; the scheduler says whether it knows it)."""
    model = config.resolve(name)
    return model.id if model is not None else name
