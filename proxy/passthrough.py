"""Path-addressed passthrough to a model: `/upstream/<model>/<path>`, and the building block of the
ComfyUI endpoint (`comfyui.py`).

The reusable part is `passthrough()`:

    async def passthrough(
        request: web.Request,
        model_id: str,
        raw_path: str,
        *,
        ignored: Callable[[web.Request, str], str | None] | None = None,
        local_only: bool = False,
    ) -> web.StreamResponse

* `model_id`: the model to serve (an id, or an alias unless `local_only`).
* `raw_path`: the path to send upstream, prefix already stripped, percent-escapes exactly as the
  client sent them, starting with `/`, WITHOUT the query (the request's raw query is appended).
* `ignored(request, raw_path)`: while the model is not ready (or is draining), a returned reason
  answers 409 `model <id> is not loaded; <reason>` and starts nothing; while it is ready, a matching
  request (not a websocket) is forwarded outside admission, so it never keeps the model loaded.
  Default: the `upstream.ignorePaths` rule (`path matches upstream.ignorePaths`, matched on the
  decoded path).
* Before that rule, for a model with `compat.ignoreWebsockets`, a websocket upgrade (on any path)
  while the model is not ready answers 409
  `model <id> is not loaded; ignored websocket requests cannot start it`; when it is ready the
  websocket is relayed outside admission (no slot, not in flight, closed when the model
  stops).
* `local_only=True`: look `model_id` up by exact local id only (no aliases, no peers) and answer 404
  `local model <id> not found` when missing (what `/comfyui/` needs).
* Otherwise the request goes through admission and `Ensure` like any model request.

Errors are raised as `errors.ProxyError`; the app's middleware renders them.
`redirect_with_slash(request, location)` is the 301 (GET/HEAD) / 308 (others) redirect that keeps
the query string.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

from aiohttp import web

from .context import CTX, ProxyContext
from .dispatch import not_loaded, serve_local
from .errors import ProxyError
from .forward import forward
from .peers import serve_peer
from .state import Routes
from .sync_wait import routes_of
from .websocket import is_websocket

IGNORED_PATH = "path matches upstream.ignorePaths"
IGNORED_WEBSOCKET = "ignored websocket requests cannot start it"
UPSTREAM_PREFIX = "/upstream/"

IgnoreRule = Callable[[web.Request, str], str | None]


def raw_query(request: web.Request) -> str:
    """`?query` exactly as sent, or "" when there is none."""
    _, sep, query = request.raw_path.partition("?")
    return "?" + query if sep else ""


def redirect_with_slash(request: web.Request, location: str) -> web.Response:
    status = 301 if request.method in ("GET", "HEAD") else 308
    return web.Response(status=status, headers={"Location": location + raw_query(request)})


def _upstream_ignore_paths(routes: Routes) -> IgnoreRule:
    def rule(_request: web.Request, raw_path: str) -> str | None:
        return IGNORED_PATH if routes.path_ignored(urllib.parse.unquote(raw_path)) else None

    return rule


async def passthrough(
    request: web.Request,
    model_id: str,
    raw_path: str,
    *,
    ignored: IgnoreRule | None = None,
    local_only: bool = False,
) -> web.StreamResponse:
    ctx: ProxyContext = request.app[CTX]
    routes = await routes_of(ctx)
    route = routes.by_id.get(model_id) if local_only else routes.by_name.get(model_id)
    path_qs = raw_path + raw_query(request)
    if route is None:
        if local_only:
            raise ProxyError(404, f"local model {model_id} not found")
        peer = routes.peers.get(model_id)
        if peer is None:
            raise ProxyError(404, f"model {model_id} not found")
        return await serve_peer(request, ctx, peer, path_qs)
    rt = ctx.state.runtimes[route.id]
    rule = ignored if ignored is not None else _upstream_ignore_paths(routes)
    reason = rule(request, raw_path)
    if not rt.hot:
        # The websocket rule answers first: an upgrade on any path, /ws included, is the
        # websocket case; the path rule is what also covers a plain GET to /ws.
        if route.ignore_websockets and is_websocket(request):
            raise not_loaded(route.id, IGNORED_WEBSOCKET)
        if reason is not None:
            raise not_loaded(route.id, reason)
    elif reason is not None and not is_websocket(request):
        # An ignored path must not keep the model loaded either (an open tab polls and fetches
        # assets forever): served outside admission, like an ignored websocket, so it is not TTL
        # activity, not in flight and takes no slot.
        return await forward(
            request, ctx.session, rt.base_url + path_qs, label=route.id, pool=ctx.pool
        )
    return await serve_local(request, ctx, rt, path_qs)


def upstream_target(routes: Routes, path: str) -> tuple[str, str, str | None] | None:
    """Split `/upstream/<model>/<rest>` (raw, without the query): (model name as given, its
    escaped form, "/<rest>" or None when the slash after the model is missing), or None when no
    model or peer is named. The longest leading run of segments naming one wins, so ids with `/`
    work, escaped (`a%2Fb`) or not."""
    segments = path[len(UPSTREAM_PREFIX) :].split("/")
    for n in range(len(segments), 0, -1):
        typed = "/".join(segments[:n])
        name = urllib.parse.unquote(typed)
        if name and (name in routes.by_name or name in routes.peers):
            rest = None if n == len(segments) else "/" + "/".join(segments[n:])
            return name, typed, rest
    return None


async def handle_upstream(request: web.Request) -> web.StreamResponse:
    """`/upstream/<model>/<path>`."""
    ctx: ProxyContext = request.app[CTX]
    routes = await routes_of(ctx)
    path = request.raw_path.partition("?")[0]
    target = upstream_target(routes, path)
    if target is None:
        raise ProxyError(404, f"model not found in {path!r}")
    name, typed, rest = target
    if rest is None:
        return redirect_with_slash(request, f"{UPSTREAM_PREFIX}{typed}/")
    return await passthrough(request, name, rest)
