"""What `/api/tags`, `/api/ps` and `/api/show` answer: the models the config names (ids, aliases
where `includeAliasesInList` lists them, selectors, peers' models), which are loaded and until
when, and what the config says of each (pure functions over the routing table and states).

swapd does not read model files, so the details Ollama takes from them (family, parameter size,
quantization) are empty strings; `size` and `size_vram` are the GPU memory swapd measured for
the model (0 before it has run); `context_length` and the capabilities come from the model's
`capabilities` in the config.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

from ....ipc.model_status import ModelStatus
from ....ipc.routing_table import RouteModel
from ....ipc.states import ModelState
from ...mirror.state import ModelRuntime, Routes
from . import values

# The states in which `/api/ps` lists a model: it has a process that serves.
_RUNNING = frozenset({ModelState.READY, ModelState.DRAINING})


def details() -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "",
        "family": "",
        "families": [],
        "parameter_size": "",
        "quantization_level": "",
    }


def digest(name: str) -> str:
    """A stable stand-in for Ollama's content digest: the name's SHA-256."""
    return hashlib.sha256(name.encode()).hexdigest()


def _size(status: ModelStatus | None) -> int:
    return sum(status.footprint.values()) if status is not None else 0


def names(routes: Routes) -> Iterator[tuple[str, RouteModel | None]]:
    """Every name a client may ask for that a listing shows, with its local model (None for a
    selector or a peer's model), in the order of `/v1/models`' sources."""
    table = routes.table
    for route in table.models:
        if route.unlisted:
            continue
        yield route.id, route
        if routes.include_aliases_in_list:
            for alias in route.aliases:
                yield alias, route
    for selector in table.selectors:
        if not selector.unlisted:
            yield selector.id, None
    for peer in table.peers:
        for name in peer.models:
            yield f"{peer.id}/{name}", None


def tags(routes: Routes, runtimes: Mapping[str, ModelRuntime]) -> dict[str, Any]:
    now = values.timestamp()
    models: list[dict[str, Any]] = []
    for name, route in names(routes):
        rt = runtimes.get(route.id) if route is not None else None
        shown = values.listed_name(name)
        models.append(
            {
                "name": shown,
                "model": shown,
                "modified_at": now,
                "size": _size(rt.status if rt is not None else None),
                "digest": digest(name),
                "details": details(),
            }
        )
    models.sort(key=lambda m: str(m["name"]))
    return {"models": models}


def expires_at(rt: ModelRuntime, status: ModelStatus, now: float) -> str:
    """When the model unloads if nothing uses it: its TTL left as the daemon counts it; the
    whole TTL (or keep_alive) while it is in use; `values.FOREVER` when no TTL applies."""
    left = status.ttl_left
    if left is None:
        kept = status.keep_alive
        left = kept if kept is not None else (float(rt.route.ttl) if rt.route.ttl > 0 else -1.0)
        if left < 0:
            return values.FOREVER
    # Past the longest keep_alive (one a proxy before the bound let through): no date says it.
    if not left <= values.MAX_KEEP_ALIVE_S:
        return values.FOREVER
    return values.timestamp(now + left)


def ps(
    runtimes: Mapping[str, ModelRuntime], daemon: Mapping[str, ModelStatus] | None
) -> dict[str, Any]:
    """Every running model; `daemon`: each model's status as the daemon has it now (its TTL
    left counts down there), None when it did not answer (this process's copy then)."""
    now = time.time()
    models = []
    for rt in runtimes.values():
        if rt.state not in _RUNNING:
            continue
        status = daemon.get(rt.id, rt.status) if daemon is not None else rt.status
        shown = values.listed_name(rt.id)
        size = _size(rt.status)
        entry: dict[str, Any] = {
            "name": shown,
            "model": shown,
            "size": size,
            "digest": digest(rt.id),
            "details": details(),
            "expires_at": expires_at(rt, status, now),
            "size_vram": size,
        }
        caps = rt.route.capabilities
        if caps is not None and caps.context:
            entry["context_length"] = caps.context
        models.append(entry)
    models.sort(key=lambda m: str(m["name"]))
    return {"models": models}


def show(route: RouteModel | None) -> dict[str, Any]:
    """`/api/show` of a local model (`route`) or of a selector or peer's model (None)."""
    capabilities = ["completion"]
    info: dict[str, Any] = {}
    caps = route.capabilities if route is not None else None
    if caps is not None:
        if "image" in caps.inputs:
            capabilities.append("vision")
        if caps.tools:
            capabilities.append("tools")
        if caps.context:
            # Where Ollama's clients look for the context length: `<architecture>.context_length`.
            info = {"general.architecture": "swapd", "swapd.context_length": caps.context}
    out: dict[str, Any] = {
        "modelfile": "",
        "parameters": "",
        "template": "",
        "license": "",
        "details": details(),
        "model_info": info,
        "capabilities": capabilities,
        "modified_at": values.timestamp(),
    }
    if route is not None and route.description:
        out["description"] = route.description
    return out
