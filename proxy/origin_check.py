"""Cross-site request refusal for swapd's own state-changing routes (the web UI's buttons).

A browser resends the Basic credentials it cached for swapd with any request to it, a cross-site
page's included, so a page elsewhere could unload models or switch the profile. Browsers send an
`Origin` header with every non-GET `fetch` and form post; where it is present and names another
host:port than the request's `Host`, the request is refused with a 403, as ComfyUI refuses them.
Requests without an `Origin` (curl, SDKs, servers) pass.

Browsers also send `Sec-Fetch-Site` with every request, an image or a link included; where it is
present and says anything but `same-origin` or `none` (typed in, a bookmark), the request is
refused too, as Go's `http.CrossOriginProtection` refuses it. That also covers llama-swap's
`GET /unload`, which changes state with a GET: a cross-site `<img src=.../unload>` carries no
`Origin` but does carry `Sec-Fetch-Site: cross-site`.

Only swapd's own routes that change something are checked: a non-GET on `/api/...` or `/unload`,
llama.cpp's router `POST /models/load` and `/models/unload`, llmsnap's `POST /models/sleep/<id>`,
and `GET /unload`. Model routes
(Ollama's `/api/chat`, `/api/generate`, `/api/embed`, `/api/embeddings` and `/api/show`
included), `/upstream/` and `/comfyui/` are forwarded as the client sent them (the upstream
applies its own rule, ComfyUI's for instance).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from aiohttp import web

from .dialects.paths import OLLAMA_MODEL_ROUTES, ROUTER_CHANGES
from .errors import Forbidden

_CHANGING = frozenset({"POST", "PUT", "DELETE", "PATCH"})


_OWN_SITE = frozenset({"same-origin", "none"})
# llmsnap's spelling of `POST /api/models/sleep/<id>` (the sleep API, api/ops.py).
SLEEP_PREFIX = "/models/sleep/"


def guarded(method: str, path: str) -> bool:
    if method not in _CHANGING:
        return False
    if path.startswith("/api/"):
        return path not in OLLAMA_MODEL_ROUTES  # those are model routes, forwarded
    return path == "/unload" or path in ROUTER_CHANGES or path.startswith(SLEEP_PREFIX)


def changes_state(method: str, path: str) -> bool:
    """`guarded`, and llama-swap's unload-all by GET: what `check_origin` checks."""
    return guarded(method, path) or _unload_by_get(method, path)


def _unload_by_get(method: str, path: str) -> bool:
    return method == "GET" and path == "/unload"


def _host_port(netloc: str) -> tuple[str, int | None] | None:
    try:
        parts = urlsplit("//" + netloc)
        return (parts.hostname or "").lower(), parts.port
    except ValueError:
        return None


def same_origin(origin: str, host: str) -> bool:
    """Whether `Origin` names the host:port of `Host`. As in ComfyUI, where one side has no
    port the hosts alone are compared (a default port is left out by some browsers)."""
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return False
    theirs = _host_port(netloc)
    ours = _host_port(host)
    if theirs is None or ours is None or not theirs[0] or not ours[0]:
        return False  # `Origin: null` (a sandboxed frame, a file) or garbage: not this host
    if theirs[1] is None or ours[1] is None:
        return theirs[0] == ours[0]
    return theirs == ours


def check_origin(request: web.BaseRequest) -> None:
    method, path = request.method, request.path
    own_change = guarded(method, path)
    if not own_change and not _unload_by_get(method, path):
        return
    headers = request.headers
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site.strip().lower() not in _OWN_SITE:
        raise Forbidden(
            f"cross-site request refused: Sec-Fetch-Site {site[:40]!r} (only same-origin "
            "requests may change swapd's state from a browser)",
            code="cross_origin",
        )
    if not own_change:
        return  # GET /unload: a GET's Origin, where a browser sends one, says nothing more
    origin = headers.get("Origin")
    if origin is None:
        return
    host = headers.get("Host", "")
    if not same_origin(origin, host):
        raise Forbidden(
            f"cross-origin request refused: Origin {origin[:200]!r} is not this host "
            f"({host[:200]!r})",
            code="cross_origin",
        )
