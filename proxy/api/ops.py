"""Operations endpoints: `/health`, `/running`, loading, unloading and putting to sleep."""

from __future__ import annotations

import logging

import msgspec
from aiohttp import web

from ...ipc.messages import Error, Ok, Ready, Status, StatusReply
from ...ipc.model_status import ModelStatus
from ...ipc.routing_table import RouteModel
from ...ipc.states import ModelState
from ..context import CTX, ProxyContext
from ..floor.errors import BadGateway, BadRequest, NotFound
from ..mirror.link import answer
from ..mirror.state import ModelRuntime, Routes
from ..mirror.wait import routes_of
from ..observe.combined_log import COMBINED_KEY
from ..observe.events import HUB_KEY
from ..observe.llama_view import llama_state
from ..routing.decide import model_not_found

# How long `/running` waits for the daemon's `Status` before it answers from its own copy.
_STATUS_WAIT_S = 1.0

_encode = msgspec.json.Encoder().encode
log = logging.getLogger(__name__)
_YES = frozenset({"true", "1", "yes"})
_NO = frozenset({"false", "0", "no"})


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
    """llama-swap's `/running`: the models whose process is up or on its way up or down, in its
    states (`llama_view.py`: a failed start is `stopped`, so not listed; `draining` is
    `stopping`), with its fields (`model`, `state`, `cmd`, `proxy`, `ttl`, `name`,
    `description`); and swapd's own beside them: `swapd_state`, the TTL left as the daemon counts
    it, pid, port, GPUs; failed starts under `failed`; the GPUs (total, used, free, reserved) as
    the daemon reads them; the asleep models (their process kept, their GPU memory given back)
    under `asleep`, with what each still holds and its last sleep and wake; this proxy process's
    counters under `"proxy"`."""
    ctx = request.app[CTX]
    await routes_of(ctx)
    reply = await daemon_status(ctx)
    # The daemon's answer now: the TTL left counts down, and a busy check's `checked_at` is its
    # last poll (the state broadcasts carry the figures of their moment only; a poll that finds
    # the same is not broadcast).
    live = None if reply is None else {m.model: m for m in reply.models}
    running = []
    failed = []
    asleep: list[dict[str, object]] = []
    for rt in sorted(ctx.state.runtimes.values(), key=lambda r: r.id):
        status = rt.status
        if rt.state == "failed":
            failed.append({"model": rt.id, "reason": status.reason, "since": status.since})
        if rt.state == ModelState.ASLEEP:
            asleep.append(_asleep_item(rt, live.get(rt.id) if live is not None else None))
        if llama_state(rt.state) == "stopped":
            continue
        now = live.get(rt.id) if live is not None else None
        item: dict[str, object] = {
            "model": rt.id,
            "state": llama_state(rt.state),
            "cmd": rt.route.cmd,
            "proxy": rt.base_url,
            "ttl": rt.route.ttl,
            "name": rt.route.name or "",
            "description": rt.route.description or "",
            "swapd_state": rt.state,
            "pid": status.pid,
            "port": status.port,
            "ttl_left": status.ttl_left if live is None else now.ttl_left if now else None,
            "in_flight": rt.in_flight,
        }
        if status.reason:
            item["reason"] = status.reason
        # Where it runs and what it holds there (GPU placement by memory, docs/gpus.md).
        item["gpus"] = list(status.gpus)
        item["footprint"] = status.footprint
        if status.placed_by_memory:
            item["reserved"] = status.reserved
            item["footprint_source"] = status.footprint_source
        busy = now.busy if now is not None else status.busy
        if busy is not None:  # its busyCheck's last finding
            item["busy"] = msgspec.structs.asdict(busy)
        sleep = now.sleep if now is not None else status.sleep
        if sleep is not None:  # its sleep setting: its last sleep and wake
            item["sleep"] = msgspec.to_builtins(sleep)
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
                "asleep": asleep,
                "failed": failed,
                "lingering": lingering,
                # Each GPU's memory (NVML) and what placement reserved on it; absent when the
                # daemon did not answer in time.
                **({"gpus": msgspec.to_builtins(reply.gpus)} if reply is not None else {}),
                "proxy": {
                    **ctx.stats.as_dict(),
                    "events": request.app[HUB_KEY].counters(),
                    "logs": request.app[COMBINED_KEY].counters(),
                },
            }
        ),
        content_type="application/json",
    )


def _asleep_item(rt: ModelRuntime, now: ModelStatus | None) -> dict[str, object]:
    """An asleep model, as the daemon's answer has it now (`stop_left` counts down), else as the
    mirror does."""
    status = now or rt.status
    item: dict[str, object] = {
        "model": rt.id,
        "state": rt.state,
        "since": status.since,
        "pid": status.pid,
        "port": status.port,
        "gpus": list(status.gpus),
    }
    if status.sleep is not None:
        item["sleep"] = msgspec.to_builtins(status.sleep)
    return item


async def unload(ctx: ProxyContext, model: str | None, *, unless_in_use: bool = False) -> None:
    """Ask the daemon to stop `model` (None: every model) and wait until it has; `unless_in_use`:
    a model in use is left to unload once it is no longer (the reply comes at once)."""
    answer(await ctx.link.unload(model, unless_in_use=unless_in_use), Ok)


async def handle_unload_all(request: web.Request) -> web.Response:
    """`POST /api/models/unload`: answers once every model has stopped."""
    await unload(request.app[CTX], None)
    return web.Response(body=b'{"msg":"ok"}', content_type="application/json")


async def handle_unload_legacy(request: web.Request) -> web.Response:
    """`GET /unload` (llama-swap's older form): the same, answered `OK` as text."""
    await unload(request.app[CTX], None)
    return web.Response(text="OK")


def local_model(routes: Routes, name: str, *, pinned: bool = False) -> RouteModel:
    """The local model `name` names (an id or an alias; `pinned`: through the active profile's
    pins first, as a request's model is), or the 404 (a peer's model has no local server) or
    400 (a selector picks per request) that says why there is none."""
    if pinned and name in routes.pins:
        target = routes.pins[name]
        if not target:
            raise model_not_found(name).error()
        name = target
    route = routes.model(name)
    if route is not None:
        return route
    if name in routes.peers:
        raise NotFound(f"no local server found for requested model {name}")
    selector = routes.selectors.get(name)
    if selector is not None:
        raise BadRequest(
            f"{name} is a selector, which picks a model per request: name one of "
            f"{', '.join(selector.targets)}",
        )
    raise model_not_found(name).error()


async def handle_load(request: web.Request) -> web.Response:
    """`POST /api/models/load/<id or alias>`: start the model (a swap where another must make
    room) and answer once it is ready, or with its start's error; `?wait=false` answers 202 at
    once while it loads (200 when it already is ready)."""
    ctx = request.app[CTX]
    routes = await routes_of(ctx)
    wait = request.query.get("wait", "true").strip().lower()
    if wait not in _YES | _NO:
        raise BadRequest(f"wait must be true or false, got {wait[:20]!r}")
    route = local_model(routes, request.match_info["model"], pinned=True)
    rt = ctx.state.runtimes.get(route.id)
    if wait in _NO and (rt is None or not rt.hot):
        load_soon(ctx, route.id)
        state = rt.state if rt is not None else ModelState.STOPPED
        return web.Response(
            status=202,
            body=_encode({"msg": "loading", "model": route.id, "state": state}),
            content_type="application/json",
        )
    answer(await ctx.link.ensure(route.id, cause="load"), Ready)
    return web.Response(
        body=_encode({"msg": "ok", "model": route.id, "state": ModelState.READY}),
        content_type="application/json",
    )


def load_soon(ctx: ProxyContext, model_id: str) -> None:
    """Ask the daemon to load `model_id` and answer nobody: a failure is its log's and the
    model's state's (`failed`, with the reason)."""

    def done(reply: Error | object) -> None:
        if isinstance(reply, Error):
            log.warning("loading %s failed: %s", model_id, reply.message)

    ctx.link.ensure_soon(model_id, "load", done)


async def handle_unload_one(request: web.Request) -> web.Response:
    """`POST /api/models/unload/<id or alias>`: answers once that model has stopped."""
    ctx = request.app[CTX]
    routes = await routes_of(ctx)
    route = local_model(routes, request.match_info["model"])
    await unload(ctx, route.id)
    return web.Response(
        body=_encode({"msg": "ok", "model": route.id}), content_type="application/json"
    )


async def handle_sleep(request: web.Request) -> web.Response:
    """`POST /api/models/sleep/<id or alias>` (and llmsnap's `/models/sleep/<id>`): put the model
    to sleep through its server's own calls and answer once it is asleep: `{"msg": "ok",
    "model", "state": "asleep"}`; when a request woke it at once, its state then and `"woken":
    true`. A sleep that failed stopped the model instead: 502 with why.
    A model without a sleep setting is 400 `cannot_sleep`; one that is not running, 409."""
    ctx = request.app[CTX]
    routes = await routes_of(ctx)
    route = local_model(routes, request.match_info["model"])
    reply = answer(await ctx.link.sleep(route.id), Ok)
    if reply.message == ModelState.STOPPED:
        rt = ctx.state.runtimes.get(route.id)
        why = rt.status.reason if rt is not None and rt.status.reason else "see its log"
        raise BadGateway(f"model {route.id} did not fall asleep and was stopped: {why}")
    body: dict[str, object] = {"msg": "ok", "model": route.id, "state": reply.message}
    if reply.message != ModelState.ASLEEP:
        # It fell asleep, and a request woke it at once: the sleep worked.
        body["woken"] = True
    return web.Response(body=_encode(body), content_type="application/json")
