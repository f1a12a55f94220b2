"""The proxy's aiohttp application: the app factory, the route table and the front checks
(`guard`), the first stage of every request (shutting down -> 503, CORS preflight, ambiguous
credentials -> 400, another site's page or a DNS-rebinding host -> 403 (`origin_check.py`), API
keys -> 401, `ProxyError` -> JSON error), which the one middleware,
`front`, runs for every route and `dispatch.py` for the model routes it serves directly. The
forwarding routes are `pipeline.py`'s."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import zmq.asyncio
from aiohttp import web

from ..ipc.client import DaemonClient
from ..ipc.endpoints import Endpoints
from . import pipeline
from .account import TeeBudget
from .admission import Admission
from .api import events as events_api
from .api import logs, ops, profiles, ui_routes
from .api import models as models_list
from .api import observe as observe_api
from .auth import OPEN_PATHS, check_api_key, check_single_credentials
from .context import CTX, ProxyContext, Stages
from .dialects import llamacpp_router
from .dialects.ollama import routes as ollama_routes
from .errors import ProxyError, error_response
from .mirror.link import DaemonLink
from .mirror.state import ProxyState
from .mirror.sync import StateSync
from .mirror.wait import routes_of
from .observe import events
from .observe.access_log import AccessLines
from .observe.activity import Recorder
from .observe.combined_log import COMBINED_KEY, CombinedLog
from .observe.log_hub import LogHub
from .origin_check import CORS_ORIGIN, check_browser, cors_headers, preflight
from .routing.model_routes import MODEL_ROUTES
from .upstream.pool import UpstreamPool
from .upstream.relay import Streams
from .upstream.transport import make_session

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
R = TypeVar("R", bound=web.BaseRequest)

SYNC_KEY: web.AppKey[StateSync] = web.AppKey("swapd_proxy_sync", StateSync)
# The events hub's feeds from the two logs, for the process's lifetime.
FEEDS_KEY: web.AppKey[contextlib.ExitStack] = web.AppKey("swapd_event_feeds", contextlib.ExitStack)


@web.middleware
async def front(request: web.Request, handler: Handler) -> web.StreamResponse:
    return await guard(request.app[CTX], request, handler)


async def guard(
    ctx: ProxyContext,
    request: R,
    handler: Callable[[R], Awaitable[web.StreamResponse]],
    *,
    model_route: bool = False,
) -> web.StreamResponse:
    """The front checks, then `handler`: the one first stage, whichever way a request came in
    (the Application's middleware `front`, or `dispatch.Dispatch` for model requests).

    `model_route`: the request is on one of `MODEL_ROUTES` (dispatch.py knows it by its table).
    None of those is an open path, so that lookup is skipped for them
    (`tests/unit/test_proxy_dispatch.py` holds the table to that)."""
    if ctx.closing:
        ctx.stats.refused += 1
        response = error_response(503, "swapd is shutting down", "shutting_down")
        response.force_close()
        return response
    state = ctx.state
    if request.method == "OPTIONS":
        try:
            if "Origin" in request.headers and not state.synced.is_set():
                await routes_of(ctx)  # a browser's: answered by the config's security.cors
            return preflight(request, state.routes.table.cors)
        except ProxyError as exc:
            ctx.stats.refused += 1
            return exc.response()
    ctx.enter()
    try:
        check_single_credentials(request)
        guarded = model_route or request.path not in OPEN_PATHS
        if guarded and not state.synced.is_set():
            # No table yet means no keys known yet: wait for it rather than let anyone in.
            await routes_of(ctx)
        # Before the key: another site's page is refused whatever it presents, and an allowed
        # one can read a 401 too.
        allowed = check_browser(request, state.routes.table.cors)
        if allowed is not None:
            request[CORS_ORIGIN] = allowed
        if guarded:
            keys = state.routes.api_keys
            if keys:
                check_api_key(request, keys)
        return await handler(request)
    except ProxyError as exc:
        ctx.stats.refused += 1
        return exc.response(request.headers.get("Accept", ""))
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.text and not exc.content_type.endswith("json"):
            # aiohttp's own 404/405 (unknown path, wrong method) in the one error shape; an
            # `Allow` header and the like are kept.
            kept = {
                k: v for k, v in exc.headers.items() if k not in ("Content-Type", "Content-Length")
            }
            accept = request.headers.get("Accept", "")
            return error_response(exc.status, exc.text.strip(), headers=kept, accept=accept)
        raise
    finally:
        ctx.leave()


async def _cors_answer(request: web.Request, response: web.StreamResponse) -> None:
    """The answer to an allowed other site's request carries its CORS headers (every request
    with an `Origin` comes the Application's way: `dispatch.py`)."""
    origin = request.get(CORS_ORIGIN)
    if origin is not None:
        cors_headers(origin, request.app[CTX].state.routes.table.cors, response.headers)


def make_app(
    *,
    run_dir: Path,
    processes: int = 1,
    proxy_id: str | None = None,
    stages: Stages | None = None,
) -> web.Application:
    """The proxy's application; its context is made at start-up. `stages`: a benchmark's
    stand-ins for some stages of the pipeline (`benchmarks/pipeline_stages.py`); swapd never
    passes any."""
    stages = stages or Stages()
    # The body limit applies where a body is read (body.py), not here: passthrough bodies stream.
    app = web.Application(middlewares=[front], client_max_size=1024**4)

    async def startup(app: web.Application) -> None:
        endpoints = Endpoints(run_dir)
        context = zmq.asyncio.Context.instance()
        state = ProxyState(processes)
        link = DaemonLink(DaemonClient(endpoints.daemon, context=context), state, proxy_id)
        hub = LogHub()
        logging.getLogger().addHandler(hub)
        tee = TeeBudget()
        recorder = Recorder(link.proxy_id, link.cast_soon, state, tee)
        lines = AccessLines(hub, enabled=stages.access_lines)
        app[CTX] = ProxyContext(
            run_dir=run_dir,
            processes=processes,
            state=state,
            link=link,
            admission=Admission(state, link),
            session=make_session(),
            pool=UpstreamPool(),
            logs=hub,
            recorder=recorder,
            lines=lines,
            streams=Streams(tee),
            stages=stages,
        )
        event_hub = app[events.HUB_KEY] = events.EventHub(state)
        event_hub.on_cancel = recorder.cancel
        link.watching = lambda: event_hub.watchers
        event_hub.on_watchers = link.hello_soon
        state.changes.listen(lines.applied)
        sync = StateSync(state, link, endpoints.events, context=context)
        app[SYNC_KEY] = sync
        sync.start()
        combined = app[COMBINED_KEY] = CombinedLog(hub, state)
        combined.start()
        feeds = app[FEEDS_KEY] = contextlib.ExitStack()
        feeds.enter_context(hub.subscribe(event_hub.proxy_log))
        feeds.enter_context(combined.upstream.subscribe(event_hub.upstream_log))
        log.info("proxy %s started (pid %d, %d process(es))", link.proxy_id, link.pid, processes)

    async def cleanup(app: web.Application) -> None:
        app[FEEDS_KEY].close()
        await app[COMBINED_KEY].close()
        await app[SYNC_KEY].close()
        ctx = app[CTX]
        ctx.recorder.send = None
        report = ctx.recorder.take()
        if report is not None:  # the last batch, before the link closes
            with contextlib.suppress(Exception):
                await ctx.link.client.cast(report)
        await ctx.session.close()
        ctx.pool.close()
        ctx.link.close()
        ctx.lines.flush()
        ctx.lines.hub = None
        logging.getLogger().removeHandler(ctx.logs)

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    app.on_response_prepare.append(_cors_answer)

    router = app.router
    router.add_get("/health", ops.handle_health)
    router.add_get("/wol-health", ops.handle_health)  # llama-swap's, for wake-on-LAN proxies
    for method, path in MODEL_ROUTES:
        router.add_route(method, path, pipeline.handle_model_route)
    router.add_get("/v1/models", models_list.handle_models)
    router.add_get("/models", models_list.handle_models)
    router.add_route("*", "/upstream/{tail:.*}", pipeline.handle_upstream)
    router.add_route("*", "/comfyui", pipeline.handle_comfyui)
    router.add_route("*", "/comfyui/{tail:.*}", pipeline.handle_comfyui)
    router.add_get("/running", ops.handle_running)
    router.add_post("/api/models/unload", ops.handle_unload_all)
    router.add_post("/api/models/unload/{model:.+}", ops.handle_unload_one)
    router.add_get("/unload", ops.handle_unload_legacy)
    router.add_get("/api/events", events_api.handle_events)
    router.add_get("/api/version", observe_api.handle_version)
    router.add_get("/api/inflight", observe_api.handle_inflight)
    router.add_post("/api/inflight/{id}/cancel", observe_api.handle_cancel)
    router.add_get("/api/metrics/activity", observe_api.handle_activity)
    router.add_get("/api/metrics/stats", observe_api.handle_stats)
    router.add_get("/metrics", observe_api.handle_metrics)
    router.add_get("/api/performance", observe_api.handle_performance)
    router.add_get("/api/hardware", observe_api.handle_hardware)
    router.add_get("/api/profiles", profiles.handle_profiles)
    router.add_put("/api/profiles/active", profiles.handle_set_active)
    router.add_get("/api/captures/{id}", observe_api.handle_capture)
    router.add_get("/logs", logs.handle_logs)
    router.add_get("/logs/stream", logs.handle_stream)
    router.add_get("/logs/stream/{which:.+}", logs.handle_stream)
    router.add_post("/api/models/load/{model:.+}", ops.handle_load)
    router.add_post("/api/models/sleep/{model:.+}", ops.handle_sleep)
    router.add_post("/models/sleep/{model:.+}", ops.handle_sleep)  # llmsnap's README spells it so
    llamacpp_router.register(app)
    ollama_routes.register(app)
    ui_routes.register(app)
    return app
