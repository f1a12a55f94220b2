"""Configs for the eviction policies' tests: models with or without `gpus` (`models.model`), and
groups."""

from __future__ import annotations

from swapd.daemon.config import Config, GroupConfig
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
