"""The request pipeline for every route that forwards: model routes, `/upstream/`, `/comfyui/`
(stages 2 to 6 of a request's way; `dispatch.py` lists them all, the front checks before these are
`front.guard`, and the access line after them `observe/access_log.py`).

2. the route decision (`_pipeline`'s `serve`): the model named (body or query, bounded:
   `routing/body.py`, or a dialect's reader: `Way`), then `routing/decide.py`, a pure function of
   method, path, headers, model and routing table -> serve, refuse, redirect. What it serves
   travels on as one record, `forwarding.Forwarding`.
3. admission (`_serve_local`): the request's place with its model is one `async with`
   (`admission.Slot`: the per-model limit, 429; in flight while the upstream serves it); a ready
   model is served at once with no IPC, any other waits for the daemon's `Ensure` (`_admit`: a
   start, a swap, a drain) as long as the client stays; ignored paths and websockets of a ready
   model skip admission; a peer's model never counts here (`forwarding.serve_peer`)
4. forward (`forwarding.send`, then `upstream/forward.py`): the client's request, Host and body
   as sent, on the lean pool for `http://` upstreams or aiohttp's client for the rest
5. relay (`upstream/relay.py`, `upstream/websocket.py`)
6. accounting: in-flight counts and TTL activity (`admission.py`), the counters and the activity
   recorder (`ctx.stats`, `ctx.recorder`)

Every stage is handed the proxy's context (`context.ProxyContext`) and the request as aiohttp's
`BaseRequest`; nothing here imports the observability folder (`observe/`): what the request path
records it records through the context.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from ..ipc.messages import Error
from . import loading
from .admission import Slot
from .context import CTX, ProxyContext
from .floor.account import ACCOUNT, Account
from .floor.errors import ProxyError, Refused, Unavailable
from .forwarding import Forwarding, send, serve_peer
from .mirror.state import ModelRuntime
from .mirror.wait import routes_of
from .routing import decide
from .routing.body import RequestModel
from .routing.model_routes import is_model_route
from .upstream.address import UpstreamAddress
from .upstream.forward import ReplyRewrite
from .upstream.websocket import is_websocket

# How long a request that got `Ready` for a model this process still sees draining waits for
# the mirror to show the model's new run ready (the reply and the broadcasts travel on different
# sockets, so either may arrive first; the events follow within milliseconds). Past it, the mirror
# is taken at its word, the model being drained (again): the request asks the daemon once more,
# which queues it behind that drain. The `_CATCH_UP_TRIES`th such `Ready` is answered 503. Each
# `Ready` is claimed (admitted or not taken) at once when decided: the daemon holds the model for
# it until then (docs/architecture.md, "Ready and drain"), at most `timings.CLAIM_WITHIN`.
_CATCH_UP_S = 1.0
_CATCH_UP_TRIES = 3
# How long a request refused by a model taken as ready waits to hear from the daemon that the
# model stopped, before it is answered with the 502.
_REFUSED_WAIT_S = 5.0


def target(request: web.BaseRequest) -> tuple[str, str]:
    """(raw path, `?query` or ""), exactly as sent. An absolute-form target
    (`POST http://host/v1/... HTTP/1.1`, RFC 9112 §3.2.2) counts by its path and query."""
    raw = request.raw_path
    if not raw.startswith("/"):
        rel = request.rel_url
        query = rel.raw_query_string
        raw = rel.raw_path + ("?" + query if query else "")
    path, sep, query = raw.partition("?")
    return path, sep + query


@dataclass(slots=True)
class Way:
    """What a dialect (`dialects/`) hands the pipeline for one request, read from another API's
    request: `found`, the model named and the body to send (`RequestModel.rewritten` when the
    dialect wrote it); `path` and `query`, the model's own route (`?...` or ""); `reply`, the
    rewrite of the model's answer, None to relay it as it is. The stages after the reader carry
    them like any model request's."""

    found: RequestModel
    path: str
    query: str = ""
    reply: ReplyRewrite | None = None


Reader = Callable[[web.Request], Awaitable[Way]]
Serve = Callable[[ProxyContext, web.BaseRequest], Awaitable[web.StreamResponse]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _pipeline(
    decide_for: Callable[..., decide.Decision],
    route: str,
    *,
    by_body: bool = False,
    dialect: Reader | None = None,
) -> Serve:
    """The pipeline for one kind of route: `decide_for` decides it, `route` names it in the
    activity log, `by_body`: the model is named in the body or query; `dialect`: another API's
    request, which that dialect reads into the model's own (`Way`). Made once per
    kind (a request's way in is then one coroutine, not a wrapper around one). It is handed the
    proxy's context and never asks the request for its app: `dispatch.py` hands it requests that
    have none (aiohttp's `BaseRequest` has no `app`, so a type check holds every stage to that).
    A dialect's routes are the Application's, whose requests have one."""

    async def serve(ctx: ProxyContext, request: web.BaseRequest) -> web.StreamResponse:
        # Set once here and handed down: to the decision's stages as an argument, then in the
        # request's one record (`Forwarding`).
        acc = request[ACCOUNT] = Account()
        acc.started = ctx.loop.time()
        acc.route = route
        recorder = ctx.recorder
        recorder.begin(request, acc)
        if route != "upstream":  # `/upstream/` is listed by the path below its model
            recorder.decide(acc, route == "model", request.method)
        try:
            state = ctx.state
            routes = state.routes if state.synced.is_set() else await routes_of(ctx)
            rewrite = None
            found: RequestModel | None
            if dialect is not None:
                assert isinstance(request, web.Request)  # the Application's (see above)
                way = await dialect(request)
                found, path, query, rewrite = way.found, way.path, way.query, way.reply
            else:
                found = await ctx.read_model(request) if by_body else None
                path, query = target(request)
            if found is not None and found.name:
                acc.asked = acc.model = found.name
            if acc.keep and found is not None:
                acc.req_body = found.raw
            runtimes = state.runtimes
            ask = decide.Ask(
                request.method,
                path,
                query,
                is_websocket(request),
                found.name if found else None,
                runtimes,
            )
            decision = decide_for(ask, routes, state.ready, state.dozing)
            if isinstance(decision, decide.Refuse):
                raise decision.error()
            if isinstance(decision, decide.Redirect):
                return web.Response(status=decision.status, headers={"Location": decision.location})
            if route == "upstream":
                below = decision.path_qs.partition("?")[0]
                recorder.decide(acc, is_model_route(request.method, below), request.method)
            fwd = Forwarding(
                request=request, ctx=ctx, acc=acc, decision=decision, found=found, rewrite=rewrite
            )
            if decision.peer is not None:
                return await serve_peer(fwd)
            assert decision.route is not None
            return await _serve_local(fwd, runtimes[decision.route.id])
        finally:
            recorder.end(acc)

    serve.__name__ = serve.__qualname__ = f"serve_{route}"
    return serve


def _handler(serve: Serve) -> Handler:
    """The Application's route handler for `serve` (its requests know their app)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        return await serve(request.app[CTX], request)

    handle.__name__ = handle.__qualname__ = serve.__name__.replace("serve_", "handle_")
    return handle


def dialect_handler(dialect: Reader, name: str) -> Handler:
    """The Application's handler for another API's model route (`dialects/`): `dialect` reads
    the request into the model's own; the rest is a model request's way."""
    handle = _handler(_pipeline(decide.for_model, "model", dialect=dialect))
    handle.__name__ = handle.__qualname__ = f"handle_{name}"
    return handle


serve_model = _pipeline(decide.for_model, "model", by_body=True)
serve_upstream = _pipeline(decide.for_upstream, "upstream")
serve_comfyui = _pipeline(decide.for_comfyui, "comfyui")
# The route table's: `dispatch.py` serves the model routes itself (`serve_model`), save a
# request with `Expect` or an escaped path, which comes this way.
handle_model_route = _handler(serve_model)
handle_upstream = _handler(serve_upstream)
handle_comfyui = _handler(serve_comfyui)


# --------------------------------------------------------------------------------------------------
# local models


async def _serve_local(fwd: Forwarding, rt: ModelRuntime) -> web.StreamResponse:
    fwd.acc.model = rt.id
    ctx = fwd.ctx
    fwd.outgoing()
    if not fwd.decision.admitted:
        ctx.stats.outside_admission += 1
        return await send(fwd, rt, rt.address)
    async with ctx.admission.slot(rt) as slot:
        progress = None
        if not rt.hot and loading.wanted(fwd.request, rt, fwd.found):
            progress = loading.Progress(fwd.request, ctx, rt, fwd.acc.asked or rt.id)
        try:
            return await _send_admitted(fwd, slot, progress)
        except ProxyError as exc:
            if progress is None or progress.response is None:
                raise
            slot.end()  # done upstream: out of flight before the error is written
            return await progress.failed(exc)  # the stream's 200 is sent: the error goes in it


async def _send_admitted(
    fwd: Forwarding, slot: Slot, progress: loading.Progress | None
) -> web.StreamResponse:
    """Admit the request in `slot` and send it: a ready model at once, with no await; any other
    once the daemon answers (`_admit`)."""
    ctx, rt = fwd.ctx, slot.rt
    stats = ctx.stats
    stats.forwarded += 1
    hot = rt.hot
    if hot:
        stats.served_without_ipc += 1
        slot.begin()
        address = rt.address
    else:
        address = await _admit(ctx, fwd.acc, slot, progress)
    if progress is not None:
        await progress.done()
    into = progress.response if progress is not None else None
    try:
        return await send(fwd, rt, address, into)
    except Refused:
        # Taken as ready, and nothing listens on its port: its process is gone and the
        # daemon's word of it has not reached this process yet. Nothing was sent: once
        # that word comes, the request waits for the daemon as for a stopped model
        # (which starts it again), and is sent once more.
        if not hot:
            raise
        stats.refused_ready += 1
        slot.end()  # not in flight while it waits: it holds up no drain
        if not await _heard_stopped(ctx, rt):
            raise
    address = await _admit(ctx, fwd.acc, slot)
    return await send(fwd, rt, address)


async def _heard_stopped(ctx: ProxyContext, rt: ModelRuntime) -> bool:
    """Whether the daemon's word that `rt` is no longer ready reaches this process within
    `_REFUSED_WAIT_S` (it sees a model's exit at once, and through circus within a second).
    Taken at the change itself: a restart may make it ready again soon after."""
    return await ctx.state.changes.until(lambda: not rt.hot, _REFUSED_WAIT_S)


async def _admit(
    ctx: ProxyContext,
    acc: Account,
    slot: Slot,
    progress: loading.Progress | None = None,
) -> UpstreamAddress:
    """Wait until `slot`'s model may serve and count the request in flight (`slot.begin`); the
    slot ends it. With `progress`, the wait streams loading progress to the client."""
    rt = slot.rt
    ctx.stats.waited_for_start += 1
    loop = ctx.loop
    started = loop.time()

    def may_serve() -> bool:
        return rt.drain_epoch is None or rt.hot

    def new_run_ready() -> bool:
        # Ready itself, not only "no drain": a new run that is still starting clears the drain
        # too, and nothing listens on its port yet.
        return rt.hot

    try:
        for _ in range(_CATCH_UP_TRIES):
            ensure = ctx.link.ensure(rt.id)
            reply = await (progress.wait(ensure) if progress is not None else ensure)
            if isinstance(reply, Error):
                raise ProxyError.from_reply(reply)
            upstream: str | None = reply.upstream
            if not may_serve():
                # Not a poll: woken by the change that shows the model's new run.
                caught_up = ctx.state.changes.until(new_run_ready, _CATCH_UP_S)
                try:
                    await (progress.wait(caught_up) if progress is not None else caught_up)
                except BaseException:
                    ctx.admission.unclaimed(rt)
                    raise
                if not new_run_ready():  # the bound passed, or a drain came in the meantime
                    ctx.admission.unclaimed(rt)
                    continue
                upstream = None  # the mirror's run is the one to send it to now
            # Between the check and begin() nothing can run: a Draining that arrives later sees
            # this request in flight and waits for it.
            slot.begin(claim=True)
            if upstream and upstream.rstrip("/") != rt.base_url:
                return UpstreamAddress.parse(upstream)
            return rt.address
        raise Unavailable(
            f"the daemon has {rt.id} ready, but this proxy's copy of its state still shows it "
            f"being drained ({_CATCH_UP_TRIES} answers, {_CATCH_UP_S:g} s each); retry shortly",
            code="state_out_of_step",
        )
    finally:
        acc.waited = loop.time() - started
