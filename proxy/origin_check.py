"""Cross-site request refusal for swapd's own state-changing routes (the web UI's buttons).

A browser resends the Basic credentials it cached for swapd with any request to it, a cross-site
page's included, so a page elsewhere could unload models or switch the profile. Browsers send an
`Origin` header with every non-GET `fetch` and form post; where it is present and names another
host:port than the request's `Host`, the request is refused with a 403, as ComfyUI refuses them.
Requests without an `Origin` (curl, SDKs, servers) pass.

Only swapd's own routes that change something are checked: a non-GET on `/api/...` or `/unload`.
Model routes, `/upstream/` and `/comfyui/` are forwarded as the client sent them (the upstream
applies its own rule, ComfyUI's for instance).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from aiohttp import web

from .errors import ProxyError

_CHANGING = frozenset({"POST", "PUT", "DELETE", "PATCH"})


def guarded(method: str, path: str) -> bool:
    return method in _CHANGING and (path.startswith("/api/") or path == "/unload")


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


def check_origin(request: web.Request) -> None:
    if not guarded(request.method, request.path):
        return
    origin = request.headers.get("Origin")
    if origin is None:
        return
    host = request.headers.get("Host", "")
    if not same_origin(origin, host):
        raise ProxyError(
            403,
            f"cross-origin request refused: Origin {origin[:200]!r} is not this host "
            f"({host[:200]!r})",
            "cross_origin",
        )
