"""Configs for the eviction policies' tests: models with or without `gpus` (`models.model`), and
groups; and the question llama-swap asks its policy, `evict_for`, put to the policy swapd chooses
for a config."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from swapd.daemon.config import Config, GroupConfig
from swapd.daemon.errors import ModelNotFound
from swapd.daemon.policy import names
from swapd.daemon.policy.eviction.choose import choose
from swapd.daemon.policy.eviction.contract import Ask, MakeRoom, Occupant, Room
from swapd.ipc.states import ModelState
from tests.support.models import model


def config(
    models: dict[str, tuple[str, ...] | None] | list[str],
    groups: dict[str, GroupConfig] | None = None,
) -> Config:
    if isinstance(models, list):
        models = dict.fromkeys(models)
    return Config(
        models={mid: model(mid, gpus) for mid, gpus in models.items()},
        groups=groups or {},
    )


def group(
    *members: str, swap: bool = True, exclusive: bool = True, persistent: bool = False
) -> GroupConfig:
    return GroupConfig(members=members, swap=swap, exclusive=exclusive, persistent=persistent)


def evict_for(
    target: str,
    running: Iterable[str],
    config: Config,
    *,
    canonical_gpus: Mapping[str, str] | None = None,
) -> frozenset[str]:
    """What the eviction policy chosen for `config` stops for `target` while `running` run (ready,
    idle), as llama-swap's `EvictionFor` is asked. `target` is resolved as a request's name is
    (an alias too); an unknown one raises KeyError."""
    try:
        model = names.resolve(config, target)
    except ModelNotFound:
        raise KeyError(f"unknown model {target!r}") from None
    policy = choose(config, canonical_gpus=canonical_gpus)
    occupants = {
        m: Occupant(m, config.models.get(m), ModelState.READY) for m in running if m != model.id
    }
    ask = Ask(model, now=0.0, queued_at=0.0, collate_window=0.0)
    decision = policy.decide(ask, Room(occupants))
    assert isinstance(decision, MakeRoom), decision
    return decision.stop
