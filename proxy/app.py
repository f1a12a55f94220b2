"""The proxy's aiohttp application: the app factory (everything one proxy holds, made and wired
at start-up into its context) and the route table. Its one middleware is the front checks
(`front.py`); the forwarding routes are `pipeline.py`'s. The model routes' requests mostly come
the faster way, `dispatch.py`, which reads its table from this router."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import zmq.asyncio
from aiohttp import web

from ..ipc.client import DaemonClient
from ..ipc.endpoints import Endpoints
from . import pipeline
from .admission import Admission
from .api import events as events_api
from .api import logs, ops, profiles, ui_routes
from .api import models as models_list
from .api import observe as observe_api
from .context import CTX, ProxyContext
from .dialects import llamacpp_router
from .dialects.ollama import routes as ollama_routes
from .dispatch import Stages
from .floor.account import TeeBudget
from .front import cors_answer, front
from .mirror.link import DaemonLink
from .mirror.state import ProxyState
from .mirror.sync import StateSync
from .observe import events
from .observe.access_log import AccessLines
from .observe.activity import Recorder
from .observe.combined_log import COMBINED_KEY, CombinedLog
from .observe.log_hub import LogHub
from .routing.model_routes import MODEL_ROUTES
from .upstream.pool import UpstreamPool
from .upstream.relay import Streams
from .upstream.transport import make_session

log = logging.getLogger(__name__)

SYNC_KEY: web.AppKey[StateSync] = web.AppKey("swapd_proxy_sync", StateSync)
# The events hub's feeds from the two logs, for the process's lifetime.
FEEDS_KEY: web.AppKey[contextlib.ExitStack] = web.AppKey("swapd_event_feeds", contextlib.ExitStack)


def make_app(
    *,
    run_dir: Path,
    processes: int = 1,
    proxy_id: str | None = None,
    stages: Stages | None = None,
) -> web.Application:
    """The proxy's application; its context is made at start-up. `stages`: a benchmark's
    stand-ins for some stages of the pipeline (`dispatch.Stages`); swapd never passes any."""
    stages = stages or Stages()
    # The body limit applies where a body is read (body.py), not here: passthrough bodies stream.
    app = web.Application(middlewares=[front], client_max_size=1024**4)

    async def startup(app: web.Application) -> None:
        endpoints = Endpoints(run_dir)
        context = zmq.asyncio.Context.instance()
        state = ProxyState(processes)
        # The link tells the daemon how many clients watch the events hub, which the hub
        # counts (read when a Hello goes out, once the hub below exists).
        link = DaemonLink(
            DaemonClient(endpoints.daemon, context=context),
            state,
            proxy_id,
            watching=lambda: event_hub.watchers,
        )
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
            read_model=stages.read_model,
            upstream_headers=stages.upstream_headers,
        )
        event_hub = app[events.HUB_KEY] = events.EventHub(
            state, on_cancel=recorder.cancel, on_watchers=link.hello_soon
        )
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
    app.on_response_prepare.append(cors_answer)

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
    router.add_get("/api/version", ollama_routes.handle_version)
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
