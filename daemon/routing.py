"""Config -> the routing table the daemon publishes to proxies (they never read the config file).

A model's routing fields are `ipc.routing_table.ModelRouting`, which `ModelConfig` extends, and a
peer is the ipc struct itself: nothing here is copied field by field.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import msgspec

from ..ipc.path_patterns import search_form
from ..ipc.routing_table import ModelRouting, RouteModel, RoutingTable
from .config import Config, ModelConfig

_ROUTING_FIELDS = ModelRouting.__struct_fields__


def route(model: ModelConfig) -> RouteModel:
    shared = {name: getattr(model, name) for name in _ROUTING_FIELDS}
    return RouteModel(**shared, upstream=model.proxy, cmd=shlex.join(model.cmd))


def with_profile(table: RoutingTable, name: str | None, generation: int) -> RoutingTable | str:
    """The table with profile `name` active (None: none); the same table when it already is; or
    the error message, llama-swap's, for a profile the config does not have."""
    name = name or None
    if name is not None and name not in {p.id for p in table.profiles}:
        return f'profile "{name}" not found'
    if name == table.active_profile:
        return table
    return msgspec.structs.replace(table, generation=generation, active_profile=name)


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
        log_time_format=config.log_time_format,
        profiles=tuple(config.profiles[name] for name in sorted(config.profiles)),
        selectors=tuple(config.selectors.values()),
        capture_bytes=config.capture_buffer * 1024 * 1024,
        ollama_api=config.ollama_api,
        session_headers=config.session_headers,
        client_body_timeout=config.client_body_timeout,
        send_timeout=config.send_timeout,
        client_body_min_rate=config.client_body_min_rate,
        drain_client_timeout=config.drain_client_timeout,
        cors=config.cors,
    )
