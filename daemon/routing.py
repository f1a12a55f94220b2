"""Config -> the routing table the daemon publishes to proxies (they never read the config file)."""

from __future__ import annotations

from pathlib import Path

from ..ipc.messages import RouteFilters, RouteModel, RoutePeer, RoutingTable
from .config import Config, Filters


def _filters(filters: Filters) -> RouteFilters:
    return RouteFilters(strip_params=filters.strip_params, set_params=dict(filters.set_params))


def routing_table(config: Config, generation: int, log_dir: Path | None = None) -> RoutingTable:
    models = tuple(
        RouteModel(
            id=m.id,
            upstream=m.proxy,
            concurrency_limit=m.concurrency_limit,
            ttl=m.ttl,
            aliases=m.aliases,
            unlisted=m.unlisted,
            use_model_name=m.use_model_name,
            ignore_websockets=m.ignore_websockets,
            host_header=m.host_header,
            name=m.name,
            description=m.description,
            metadata=dict(m.metadata),
            filters=_filters(m.filters),
        )
        for m in config.models.values()
    )
    peers = tuple(
        RoutePeer(
            id=pid,
            proxy=p.proxy,
            models=p.models,
            api_key=p.api_key,
            filters=_filters(p.filters),
        )
        for pid, p in config.peers.items()
    )
    return RoutingTable(
        generation=generation,
        models=models,
        peers=peers,
        api_keys=config.api_keys,
        ignore_paths=config.ignore_paths,
        include_aliases_in_list=config.include_aliases_in_list,
        log_dir=str(log_dir) if log_dir is not None else "",
        log_level=config.log_level,
    )
