"""`GET /v1/models` and `GET /models`: OpenAI's list shape, sorted by id.

Unlisted models are hidden (they stay requestable); with `includeAliasesInList` each alias gets its
own entry; peer models appear as `<peer>/<model>`. `status.value` says whether a local model is
loaded in llama.cpp's router's words (`loading`, `loaded`, `sleeping`, `unloaded`; `failed: true`
after a failed start), so that router's clients read it; peer models are always `unloaded`.
`meta.llamaswap` keeps llama-swap's shape so tools written for it keep working.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import msgspec
from aiohttp import web

from ...ipc.routing_table import RouteModel, RouteSelector
from ...ipc.states import LOADED_STATES, SERVING_STATES, ModelState
from ..context import CTX
from ..mirror.wait import routes_of
from ..observe import capabilities
from .ops import ttl_left_now

OWNED_BY = "swapd"
_encode = msgspec.json.Encoder().encode


def _entry(
    entry_id: str, route: RouteModel, created: int, status: dict[str, Any], meta: dict[str, Any]
) -> dict[str, Any]:
    item: dict[str, Any] = {"id": entry_id, "object": "model", "created": created}
    item["owned_by"] = OWNED_BY
    if route.name and route.name.strip():
        item["name"] = route.name.strip()
    if route.description and route.description.strip():
        item["description"] = route.description.strip()
    metadata = route.metadata
    if route.capabilities is not None:
        rendered = capabilities.render(route.capabilities)
        item.update(rendered)
        metadata = {k: v for k, v in metadata.items() if k not in capabilities.OWNED}
    item["meta"] = {"llamaswap": {**metadata, **meta}}
    if "context_length" in item:
        item["meta"]["n_ctx"] = item["context_length"]
    item["status"] = status
    return item


def _selector_entry(
    selector: RouteSelector, created: int, runtimes: Mapping[str, Any]
) -> dict[str, Any]:
    """llama-swap's selector row: loaded when a local target is ready or starting (for `pin`,
    its first target)."""
    item: dict[str, Any] = {"id": selector.id, "object": "model", "created": created}
    item["owned_by"] = OWNED_BY
    if selector.name and selector.name.strip():
        item["name"] = selector.name.strip()
    if selector.description and selector.description.strip():
        item["description"] = selector.description.strip()
    meta: dict[str, Any] = {
        **selector.metadata,
        "type": "selector",
        "strategy": selector.strategy,
        "targets": list(selector.targets),
    }
    if selector.strategy == "spillover":
        meta["spillover"] = selector.spillover
    item["meta"] = {"llamaswap": meta}
    looked = selector.targets[:1] if selector.strategy == "pin" else selector.targets
    loaded = any(t in runtimes and runtimes[t].state in SERVING_STATES for t in looked)
    item["status"] = {"value": "loaded" if loaded else "unloaded"}
    return item


def status_value(state: ModelState) -> str:
    """`status.value` in llama.cpp's router's words: `loading` while it starts (or wakes),
    `sleeping` while asleep (its router's word for a child that gave its memory back and wakes on
    the next request), `loaded` while a process serves (or is being stopped or put to sleep),
    `unloaded` otherwise."""
    if state in (ModelState.STARTING, ModelState.WAKING):
        return "loading"
    if state == ModelState.ASLEEP:
        return "sleeping"
    return "loaded" if state in LOADED_STATES else "unloaded"


async def handle_models(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    routes = await routes_of(ctx)
    created = int(time.time())
    ttl_left = await ttl_left_now(ctx)
    data: list[dict[str, Any]] = []
    for route in routes.table.models:
        if route.unlisted:
            continue
        rt = ctx.state.runtimes.get(route.id)
        state = rt.state if rt is not None else ModelState.STOPPED
        left = rt.status.ttl_left if rt is not None else None
        status: dict[str, Any] = {
            "value": status_value(state),
            "state": state,
            "ttl": route.ttl,
            "ttl_left": ttl_left.get(route.id) if ttl_left is not None else left,
        }
        if state == "failed":
            status["failed"] = True  # llama.cpp's router says so of a model that failed to load
        meta: dict[str, Any] = {"type": "model"}
        if route.aliases:
            meta["aliases"] = list(route.aliases)
        data.append(_entry(route.id, route, created, status, meta))
        if routes.include_aliases_in_list:
            for alias in route.aliases:
                data.append(
                    _entry(alias, route, created, status, {"type": "alias", "modelID": route.id})
                )
    for selector in routes.table.selectors:
        if not selector.unlisted:
            data.append(_selector_entry(selector, created, ctx.state.runtimes))
    # The active profile's pins that name something new are listed too (llama-swap's rows).
    taken = {*routes.by_name, *routes.peers, *routes.selectors}
    for pin, target in sorted(routes.pins.items()):
        if target and pin not in taken:
            data.append(
                {
                    "id": pin,
                    "object": "model",
                    "created": created,
                    "owned_by": OWNED_BY,
                    "meta": {"llamaswap": {"type": "profile", "target": target}},
                    "status": {"value": "unloaded"},
                }
            )
    for peer in routes.table.peers:
        for name in peer.models:
            data.append(
                {
                    "id": f"{peer.id}/{name}",
                    "object": "model",
                    "created": created,
                    "owned_by": OWNED_BY,
                    "name": f"{peer.id}: {name}",
                    "meta": {"llamaswap": {"type": "peer", "peerID": peer.id}},
                    "status": {"value": "unloaded"},
                }
            )
    data.sort(key=lambda item: item["id"])
    # (llama-swap echoes any Origin here; swapd answers the sites `security.cors` allows, as it
    # answers them on every route: `origin_check.py`.)
    return web.Response(
        body=_encode({"object": "list", "data": data}), content_type="application/json"
    )
