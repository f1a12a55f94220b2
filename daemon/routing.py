"""Config -> the routing table the daemon publishes to proxies (they never read the config file).

A model's routing fields are `ipc.messages.ModelRouting`, which `ModelConfig` extends, and a peer
is the ipc struct itself: nothing here is copied field by field.
"""

from __future__ import annotations

from pathlib import Path

from ..ipc.messages import ModelRouting, RouteModel, RoutingTable
from ..ipc.path_patterns import search_form
from .config import Config, ModelConfig

_ROUTING_FIELDS = ModelRouting.__struct_fields__


def route(model: ModelConfig) -> RouteModel:
    shared = {name: getattr(model, name) for name in _ROUTING_FIELDS}
    return RouteModel(**shared, upstream=model.proxy)


def routing_table(config: Config, generation: int, log_dir: Path | None = None) -> RoutingTable:
    return RoutingTable(
        generation=generation,
        models=tuple(route(m) for m in config.models.values()),
        peers=tuple(config.peers.values()),
        api_keys=config.api_keys,
        ignore_paths=tuple(search_form(p) for p in config.ignore_paths),
        include_aliases_in_list=config.include_aliases_in_list,
        log_dir=str(log_dir) if log_dir is not None else "",
        log_level=config.log_level,
        capture_bytes=config.capture_buffer * 1024 * 1024,
    )
