"""Operations endpoints: `/health`, `/running`, unloading."""

from __future__ import annotations

import msgspec
from aiohttp import web

from ...ipc.messages import Error, Ok, Status, StatusReply
from ..context import CTX, ProxyContext
from ..errors import ProxyError
from ..mirror.wait import routes_of
from ..observe.events import HUB_KEY
from ..observe.stats import STATS
from ..routing.decide import model_not_found

# How long `/running` waits for the daemon's `Status` before it answers from its own copy.
_STATUS_WAIT_S = 1.0

_encode = msgspec.json.Encoder().encode


async def handle_health(_request: web.Request) -> web.Response:
    return web.Response(text="OK")


async def daemon_status(ctx: ProxyContext) -> StatusReply | None:
    """The daemon's `Status` (what `swapd status` shows), or None when it does not answer in
    time (it is restarting: the caller answers from its local copy)."""
    try:
        reply = await ctx.link.request(lambda i: Status(id=i), timeout=_STATUS_WAIT_S)
    except Exception:
        return None
    return reply if isinstance(reply, StatusReply) else None


async def ttl_left_now(ctx: ProxyContext) -> dict[str, float | None] | None:
    """Each model's `ttl_left` now, from the daemon (the TTL's owner: what `swapd status` says),
    or None when it does not answer in time. The state broadcasts carry the value of the moment
    of the change only, which does not count down."""
    reply = await daemon_status(ctx)
    return None if reply is None else {m.model: m.ttl_left for m in reply.models}


async def handle_running(request: web.Request) -> web.Response:
    """Models in any state but `stopped`, as this proxy last heard from the daemon, with the
    TTL left as the daemon counts it, the GPUs (total, used, free, reserved) as the daemon reads
    them, and this proxy process's counters under `"proxy"`."""
    ctx = request.app[CTX]
    await routes_of(ctx)
    reply = await daemon_status(ctx)
    ttl_left = None if reply is None else {m.model: m.ttl_left for m in reply.models}
    running = []
    for rt in sorted(ctx.state.runtimes.values(), key=lambda r: r.id):
        if rt.state == "stopped":
            continue
        status = rt.status
        item: dict[str, object] = {
            "model": rt.id,
            "state": rt.state,
            "pid": status.pid,
            "port": status.port,
            "ttl": rt.route.ttl,
            "ttl_left": ttl_left.get(rt.id) if ttl_left is not None else status.ttl_left,
            "proxy": rt.base_url,
            "in_flight": rt.in_flight,
        }
        if rt.route.name:
            item["name"] = rt.route.name
        if rt.route.description:
            item["description"] = rt.route.description
        if status.reason:
            item["reason"] = status.reason
        # Where it runs and what it holds there (GPU placement by memory, docs/gpus.md).
        item["gpus"] = list(status.gpus)
        item["footprint"] = status.footprint
        if status.placed_by_memory:
            item["reserved"] = status.reserved
            item["footprint_source"] = status.footprint_source
        if status.busy is not None:  # its busyCheck's last finding
            item["busy"] = msgspec.structs.asdict(status.busy)
        running.append(item)
    # A stopped model's port still in use (CONTRACTS C1), whatever its state.
    lingering = [
        {"model": rt.id, **msgspec.structs.asdict(rt.status.lingering)}
        for rt in sorted(ctx.state.runtimes.values(), key=lambda r: r.id)
        if rt.status.lingering is not None
    ]
    return web.Response(
        body=_encode(
            {
                "running": running,
                "lingering": lingering,
                # Each GPU's memory (NVML) and what placement reserved on it; absent when the
                # daemon did not answer in time.
                **({"gpus": msgspec.to_builtins(reply.gpus)} if reply is not None else {}),
                "proxy": {**STATS.as_dict(), "events": request.app[HUB_KEY].counters()},
            }
        ),
        content_type="application/json",
    )


async def _unload(request: web.Request, model: str | None) -> None:
    reply = await request.app[CTX].link.unload(model)
    if isinstance(reply, Error):
        raise ProxyError.from_reply(reply)
    if not isinstance(reply, Ok):
        raise ProxyError(502, f"unexpected reply from the daemon: {type(reply).__name__}")


async def handle_unload_all(request: web.Request) -> web.Response:
    """`POST /api/models/unload`: answers once every model has stopped."""
    await _unload(request, None)
    return web.Response(body=b'{"msg":"ok"}', content_type="application/json")


async def handle_unload_legacy(request: web.Request) -> web.Response:
    """`GET /unload` (llama-swap's older form): the same, answered `OK` as text."""
    await _unload(request, None)
    return web.Response(text="OK")


async def handle_unload_one(request: web.Request) -> web.Response:
    """`POST /api/models/unload/<id or alias>`: answers once that model has stopped."""
    ctx = request.app[CTX]
    routes = await routes_of(ctx)
    name = request.match_info["model"]
    route = routes.model(name)
    if route is None:
        if name in routes.peers:
            raise ProxyError(404, f"no local server found for requested model {name}")
        raise model_not_found(name).error()
    await _unload(request, route.id)
    return web.Response(
        body=_encode({"msg": "ok", "model": route.id}), content_type="application/json"
    )
