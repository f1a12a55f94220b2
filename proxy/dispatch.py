"""Serve a request with a local model: admit it, get the model ready, forward it.

The hot path (model `ready`, not draining) makes no IPC: it counts the request in flight and
forwards. Anything else asks the daemon with `Ensure` and waits (joining a start, queuing behind a
swap or a drain) for as long as the client stays; a client that leaves cancels the wait.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from multidict import CIMultiDict

from ..ipc.messages import Error
from .context import ProxyContext
from .errors import ProxyError
from .forward import forward
from .state import ModelRuntime
from .websocket import is_websocket, relay_websocket

# How long a request that got `Ready` for a model this process still sees draining waits for the
# event stream to catch up before asking again (the reply and the broadcast travel on different
# sockets, so either may arrive first).
_DRAIN_RECHECK_S = 0.02


async def acquire(ctx: ProxyContext, rt: ModelRuntime) -> str:
    """Wait until `rt`'s model may serve, count the request in flight, return the upstream base.

    The caller must call `ctx.admission.end(rt)` when the request is done.
    """
    if rt.hot:
        ctx.admission.begin(rt)
        return rt.base_url
    while True:
        reply = await ctx.link.ensure(rt.id)
        if isinstance(reply, Error):
            raise ProxyError(reply.status, reply.message, reply.code, log_tail=reply.log_tail)
        if rt.drain_epoch is None or rt.hot:
            # Between the check and begin() nothing can run: a Draining that arrives later sees
            # this request in flight and waits for it.
            ctx.admission.begin(rt)
            return (reply.upstream or rt.base_url).rstrip("/")
        await asyncio.sleep(_DRAIN_RECHECK_S)


async def serve_local(
    request: web.Request,
    ctx: ProxyContext,
    rt: ModelRuntime,
    path_qs: str,
    *,
    body: bytes | None = None,
    headers: CIMultiDict[str] | None = None,
) -> web.StreamResponse:
    """Forward `request` to model `rt` at `path_qs` (raw path plus `?query`), starting it if needed.

    Websocket upgrades are relayed; those of a model with `compat.ignoreWebsockets` bypass
    admission entirely (the caller has already answered 409 if the model is not ready).
    """
    admission = ctx.admission
    if is_websocket(request):
        if rt.route.ignore_websockets:
            if not rt.hot:
                raise not_loaded(rt.id, "ignored websocket requests cannot start it")
            return await relay_websocket(request, ctx, rt.base_url + path_qs, rt.id, ignored_in=rt)
        admission.reserve(rt)
        try:
            base = await acquire(ctx, rt)
            try:
                return await relay_websocket(request, ctx, base + path_qs, rt.id)
            finally:
                admission.end(rt)
        finally:
            admission.release(rt)

    admission.reserve(rt)
    try:
        base = await acquire(ctx, rt)
        try:
            return await forward(
                request,
                ctx.session,
                base + path_qs,
                body=body,
                headers=headers,
                label=rt.id,
                pool=ctx.pool,
            )
        finally:
            admission.end(rt)
    finally:
        admission.release(rt)


def not_loaded(model_id: str, reason: str) -> ProxyError:
    return ProxyError(409, f"model {model_id} is not loaded; {reason}", "model_not_loaded")
