"""The web UI's routes: the page itself under `/ui/` (static files shipped in `proxy/ui/`; a path
without a file extension is the page, as llama-swap's single-page UI has its `/ui/models` and
the like), the redirects to it from `/ui` and `/upstream` (as llama-swap has them: `/upstream` to
its models page; `/` sends a browser to `/ui/` too, as llama-swap does:
`dialects/ollama/routes.py`, which answers Ollama's clients there), `/favicon.ico`, and the two
read APIs only the UI needed: `GET /api/status` (what `swapd status --json` prints: every model,
stopped ones included, and the GPUs) and `GET /api/swaps` (the daemon's recent swap records).

Every one of them but the icon is behind the API keys like any route (the `front` middleware): a
browser gets `WWW-Authenticate: Basic realm="swapd"` and the key is the Basic password.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from ...ipc.messages import Document, QuerySwaps, Status, StatusReply
from ...ipc.status_doc import status_json
from ..context import CTX
from ..floor.errors import NotFound
from ..ui import assets

# The page loads nothing but its own files: no CDN, no request leaving the host.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # The files change with the installed version, so revalidate (cheap: an ETag).
    "Cache-Control": "no-cache",
}
_encode = msgspec.json.Encoder().encode


async def handle_redirect(_request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/")


async def handle_upstream_redirect(_request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/models")


async def handle_asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info.get("name", "") or "index.html"
    if "." not in name:
        name = "index.html"  # the page's own routes (`/ui/models`), as a single-page app's
    return _serve(request, name)


def _serve(request: web.Request, name: str) -> web.StreamResponse:
    asset = assets.get(name)
    if asset is None:
        raise NotFound(f"no such UI file: {name}")
    if request.headers.get("If-None-Match") == asset.etag:
        return web.Response(status=304, headers={**_HEADERS, "ETag": asset.etag})
    return web.Response(
        body=asset.body,
        headers={**_HEADERS, "ETag": asset.etag, "Content-Type": asset.content_type},
    )


async def handle_favicon(request: web.Request) -> web.StreamResponse:
    """llama-swap serves its UI's icon here, without a key: so does swapd (it is no secret)."""
    return _serve(request, "favicon.ico")


async def handle_status(request: web.Request) -> web.Response:
    reply = await request.app[CTX].link.ask(lambda i: Status(id=i), StatusReply)
    return web.Response(body=_encode(status_json(reply)), content_type="application/json")


async def handle_swaps(request: web.Request) -> web.Response:
    reply = await request.app[CTX].link.ask(lambda i: QuerySwaps(id=i), Document)
    return web.Response(body=reply.body, content_type=reply.content_type)


def register(app: web.Application) -> None:
    router = app.router
    router.add_get("/upstream", handle_upstream_redirect)
    router.add_get("/favicon.ico", handle_favicon)
    router.add_get("/ui", handle_redirect)
    router.add_get("/ui/", handle_asset)
    router.add_get("/ui/{name:[A-Za-z0-9_.-]+}", handle_asset)
    router.add_get("/api/status", handle_status)
    router.add_get("/api/swaps", handle_swaps)
