"""Ollama's routes (docs/clients.md), answered on swapd's listen port while the config's
`ollamaAPI` is on (the default; off, each answers 404 as an unknown path does).

* `/api/chat`, `/api/generate`, `/api/embed`, `/api/embeddings`: the request is rewritten into
  the model's own (`requests.py`) and goes the one pipeline's way (route decision, admission,
  forward, relay, accounting: `pipeline.dialect_handler`), its answer rewritten on the way out
  (`relaying.py`). A chat or generate with nothing to answer loads the model (Ollama's way to
  preload), or with `keep_alive: 0` unloads it. A streamed chat or generate that waits for its
  model gets the loading progress (`sendLoadingState`) as `thinking` lines (`progress.py`).
* `/api/tags`, `/api/ps`, `/api/show`: `listing.py`. `/api/version` (llama-swap's too, so
  served whatever `ollamaAPI` says): `handle_version`.
* `GET /` and `HEAD /`: "Ollama is running" (Ollama's clients check it), except to a browser
  (`Accept: text/html`), which is sent to the web UI as before.
* Pulling, pushing, creating, copying and deleting models: 501, swapd runs what its config names.

Errors are Ollama's `{"error": "..."}` with the status swapd or the model answered.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from ....ipc.messages import Ready
from ....ipc.states import LOADED_STATES
from ... import pipeline
from ...api import ops
from ...context import CTX, ProxyContext
from ...floor.account import ACCOUNT
from ...floor.errors import NotFound, ProxyError
from ...floor.progress import PROGRESS_FRAMES
from ...mirror import link
from ...mirror.state import Routes
from ...mirror.wait import routes_of
from ...pipeline import Reader, Way
from ...routing import decide
from ...routing.body import RequestModel, read_json
from ..paths import OLLAMA_MODEL_ROUTES
from . import listing, replies, requests, values
from .progress import OllamaFrames
from .relaying import JSON, KeepAlives, rewrite_for
from .requests import Kind, Translated

RUNNING = "Ollama is running"
KEEPS: web.AppKey[KeepAlives] = web.AppKey("swapd_ollama_keep_alives", KeepAlives)
_TRANSLATED = "swapd.ollama"
_REFUSED = (
    "swapd serves the models its config file names; {what} models through its API is not "
    "supported: add the model to the config (docs/clients.md)"
)
_encode = msgspec.json.Encoder().encode

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def served(routes: Routes) -> bool:
    return routes.table.ollama_api


def _error(exc: ProxyError, ctx: ProxyContext) -> web.Response:
    ctx.stats.refused += 1
    headers = dict(exc.headers) if exc.headers else None
    return web.Response(
        status=exc.status,
        body=replies.error_body(exc.message),
        content_type="application/json",
        headers=headers,
    )


def _json(doc: object, request: web.Request) -> web.Response:
    # CORS: the sites `security.cors` allows get their headers on every route (origin_check.py).
    return web.Response(body=_encode(doc), content_type="application/json")


async def _routes(request: web.Request) -> Routes:
    routes = await routes_of(request.app[CTX])
    if not served(routes):
        raise web.HTTPNotFound()
    return routes


def _ollama(handler: Handler) -> Handler:
    """`handler`'s errors in Ollama's shape; a 404 for every route while `ollamaAPI` is off."""

    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            await _routes(request)
            return await handler(request)
        except ProxyError as exc:
            return _error(exc, request.app[CTX])

    handle.__name__ = handle.__qualname__ = handler.__name__
    return handle


# --------------------------------------------------------------------------------------------------
# what is configured and loaded


async def handle_root(request: web.Request) -> web.StreamResponse:
    routes = await routes_of(request.app[CTX])
    if not served(routes) or "text/html" in request.headers.get("Accept", ""):
        raise web.HTTPFound("/ui/")
    return web.Response(text=RUNNING)


async def handle_version(request: web.Request) -> web.Response:
    """llama-swap's `{version, commit, build_date}` (`ipc/build_info.py`: the commit of the
    install or checkout, the install's date). While Ollama's API is served (`ollamaAPI`),
    `version` is the Ollama API version swapd answers in its shapes, which Ollama's clients
    compare with what they need, and swapd's own is `swapd_version`."""
    from ....ipc.build_info import build_info  # here, not at start-up: the proxy's idle memory

    info = build_info()
    routes = await routes_of(request.app[CTX])
    if served(routes):
        answer = {"version": values.API_VERSION, "swapd_version": info["version"]}
        return _json(
            {**answer, "commit": info["commit"], "build_date": info["build_date"]}, request
        )
    return _json(info, request)


async def handle_tags(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    return _json(listing.tags(ctx.state.routes, ctx.state.runtimes), request)


async def handle_ps(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    reply = await ops.daemon_status(ctx)  # the TTL left counts down there
    statuses = {m.model: m for m in reply.models} if reply is not None else None
    return _json(listing.ps(ctx.state.runtimes, statuses), request)


async def handle_show(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    routes = ctx.state.routes
    doc, _raw = await read_json(request)
    asked = requests.model_of(doc)
    name = values.resolve(routes, asked)
    if not values.known(routes, name):
        raise NotFound(f"model '{asked}' not found")
    pinned = routes.pins.get(name)
    return _json(listing.show(routes.model(pinned or name)), request)


async def handle_refused(request: web.Request) -> web.Response:
    what = {
        "/api/pull": "pulling",
        "/api/push": "pushing",
        "/api/create": "creating",
        "/api/copy": "copying",
        "/api/delete": "deleting",
    }.get(request.path, "uploading")
    raise ProxyError(_REFUSED.format(what=what), status=501)


# --------------------------------------------------------------------------------------------------
# the model routes


def _reader(kind: Kind) -> Reader:
    async def read(request: web.Request) -> Way:
        translated, raw, started = request.pop(_TRANSLATED)
        body = requests.encode(translated.body)
        # What the model gets is `body` now: the translated document (an image's data URL, as
        # large as the image) need not live as long as the request.
        translated.body = {}
        if raw is None:
            request[ACCOUNT].keep = 0  # no capture: the body outgrew `captureBuffer` (handle)
        found = RequestModel(translated.name, "json", body, raw=raw, rewritten=True)
        rewrite = rewrite_for(request.app[CTX], request.app[KEEPS], translated, started)
        if translated.kind in ("chat", "generate"):  # loading progress as `thinking` lines
            request[PROGRESS_FRAMES] = OllamaFrames(translated.kind, translated.asked)
        return Way(found, translated.path, "", rewrite)

    read.__name__ = f"read_ollama_{kind}"
    return read


def _model_route(kind: Kind) -> Handler:
    through = pipeline.dialect_handler(_reader(kind), f"ollama_{kind}")

    async def handle(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        ctx = request.app[CTX]
        routes = ctx.state.routes
        # An image request's body, its decoded document, the translation (its data URLs) and
        # that encoded are each as large as its images: each is let go of as soon as the next
        # is made, so a request holds about one of them at a time (issue 40, item 8).
        doc, raw = await read_json(request)
        kept = raw if len(raw) <= routes.table.capture_bytes else None  # for the capture
        del raw
        translated = requests.translate(kind, doc, values.resolve(routes, requests.model_of(doc)))
        del doc
        if translated.empty:
            return await _load_or_unload(request, ctx, routes, translated)
        request[_TRANSLATED] = (translated, kept, started)
        del kept
        return await through(request)

    handle.__name__ = f"handle_ollama_{kind}"
    return handle


async def _load_or_unload(
    request: web.Request, ctx: ProxyContext, routes: Routes, translated: Translated
) -> web.Response:
    """Ollama's chat or generate with nothing to answer: load the model (and keep it as
    `keep_alive` says), or with `keep_alive: 0` unload it: an unload nobody waits for, so a model
    in use (by anyone) unloads once it is no longer, as Ollama's own does (docs/swapping.md, "No
    one client thrashes the GPU")."""
    ask = decide.Ask("POST", requests.CHAT_PATH, "", False, translated.name, ctx.state.runtimes)
    decision = decide.for_model(ask, routes, ctx.state.ready)
    if isinstance(decision, decide.Refuse):
        raise decision.error()
    route = decision.route if isinstance(decision, decide.Serve) else None
    unload = translated.keep_alive_given and translated.keep_alive == 0
    reason = "unload" if unload else "load"
    if route is not None and unload:
        rt = ctx.state.runtimes.get(route.id)
        if rt is not None and rt.state in LOADED_STATES:
            await ops.unload(ctx, route.id, unless_in_use=True)
    elif route is not None:
        link.answer(await ctx.link.ensure(route.id, cause="load"), Ready)
        request.app[KEEPS].answered(ctx, route.id, translated)
    answer = replies.empty_answer(translated.kind, translated.asked, reason)
    return web.Response(body=replies.encode(answer), content_type=JSON.split(";")[0])


# --------------------------------------------------------------------------------------------------


def register(app: web.Application) -> None:
    """Ollama's routes, and `/` (before the web UI's routes: it decides who is sent there)."""
    app[KEEPS] = KeepAlives()
    router = app.router
    router.add_get("/", handle_root)
    router.add_get("/api/tags", _ollama(handle_tags))
    router.add_get("/api/ps", _ollama(handle_ps))
    router.add_post("/api/show", _ollama(handle_show))
    kinds: tuple[Kind, ...] = ("chat", "generate", "embed", "embeddings")
    for kind in kinds:
        assert f"/api/{kind}" in OLLAMA_MODEL_ROUTES
        router.add_post(f"/api/{kind}", _ollama(_model_route(kind)))
    refused = _ollama(handle_refused)
    for path in ("/api/pull", "/api/push", "/api/create", "/api/copy"):
        router.add_post(path, refused)
    router.add_delete("/api/delete", refused)
    router.add_route("*", "/api/blobs/{digest}", refused)
