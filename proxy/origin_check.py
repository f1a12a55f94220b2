"""Browsers and other sites: a page on another site (another port of this host included) cannot
drive swapd, and a page under a name that is not this machine's (DNS rebinding) cannot either;
sites the operator allows get CORS answers (`security.cors`, llama-swap's keys).

A browser sends every request a page makes to swapd, cached Basic credentials included, and a
page needs no answer to do harm: a no-cors `POST /v1/chat/completions` with a `text/plain` body,
an `<img src=/upstream/m/>`, a websocket swap models as well as a script that can read. So every
request a browser makes for another site is refused (403, `cross_origin`), whatever the route;
what is not a browser's (curl, SDKs, servers: no `Origin`, no `Sec-Fetch-Site`) is never looked
at. Where a request comes from:

* `Origin` (sent with every non-GET, every websocket and every CORS request): the request's own
  site when it names the host:port of `Host` (one side without a port: the hosts alone, as
  ComfyUI compares them), else the site it names;
* `Sec-Fetch-Site` (sent by browsers with every request, an image and a link included):
  `same-origin` or `none` (typed in, a bookmark) is the page's own; `same-site` (another port)
  and `cross-site` are another site's, which for a request without `Origin` is the origin in its
  `Referer`, when there is one.

A request of this host's own pages passes; so does a top-level navigation the user made
(`GET`/`HEAD`, `Sec-Fetch-Mode: navigate`, `Sec-Fetch-Dest: document`, `Sec-Fetch-User: ?1`: a
link clicked on another site, a GET form, a `window.open` on a click), but only to the UI and to
pages that start nothing (`NAVIGABLE`, `NAVIGABLE_UNDER`): a link to `/upstream/<m>/`,
`/props?model=`, `/v1/audio/voices?model=` or llama-swap's `GET /unload` would start, swap or stop
models for another site, whatever the user meant by the click (and with a browser's cached
credentials, whatever the keys), so it is refused (403, `cross_origin`, saying why). The list is
of what may pass, so a route added later is refused to other sites until it is put there.
Another site's request
passes only when its origin is allowed: listed in `security.cors.allowedOrigins` (`*`: every
site, llama-swap's default), or the origin of an editor's or app's own page (`app://`,
`tauri://`, `vscode-webview://`, `vscode-file://`), which no web page can have. Its answer then
carries `Access-Control-Allow-Origin` (`cors_headers`), and a preflight (`OPTIONS`) is answered
for it (`preflight`).

DNS rebinding: a page at `http://rebind.example:8080` whose name an attacker points at 127.0.0.1
is same-origin with swapd as the browser sees it. So a request taken as the page's own must name
this machine in `Host` by a name no other site can point here: an IP address, a name without a
dot (`localhost`, the machine's name), one under `.localhost`, `.local`, `.lan`, `.home`,
`.internal`, `.home.arpa` or `.localdomain`, the machine's own host name, or the host of an
allowed origin; otherwise the request is refused (403, `cross_origin`).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web
from multidict import CIMultiDict

from ..ipc.routing_table import CorsPolicy
from .auth import OPEN_PATHS
from .floor.errors import Forbidden

# What the request's answer must carry: the allowed origin it came from (`cors_headers`).
CORS_ORIGIN = "swapd.cors_origin"

APP_SCHEMES = frozenset({"app", "tauri", "vscode-webview", "vscode-file"})
LOCAL_SUFFIXES = (
    ".localhost",
    ".local",
    ".lan",
    ".home",
    ".internal",
    ".home.arpa",
    ".localdomain",
)
_OWN_SITE = frozenset({"same-origin", "none"})
# Where another site's link may take the user: the UI and pages that start, swap or stop nothing
# (reads; `/` and `/upstream` send a browser to the UI). Every other GET may start a model.
NAVIGABLE = frozenset(
    {
        "/",
        "/ui",
        "/upstream",
        "/favicon.ico",
        "/health",
        "/wol-health",
        "/running",
        "/v1/models",
        "/models",
        "/metrics",
        "/logs",
        "/logs/stream",
        "/api/events",
        "/api/version",
        "/api/inflight",
        "/api/metrics/activity",
        "/api/metrics/stats",
        "/api/performance",
        "/api/hardware",
        "/api/profiles",
        "/api/status",
        "/api/swaps",
        "/api/tags",
        "/api/ps",
    }
)
NAVIGABLE_UNDER = ("/ui/", "/logs/stream/", "/api/captures/")
DEFAULT_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"
DEFAULT_HEADERS = "Content-Type, Authorization, Accept, X-Requested-With"
_TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


@dataclass(frozen=True, slots=True)
class Policy:
    """`security.cors` made ready to match against (`policy_of`)."""

    any: bool  # `*`
    origins: frozenset[str]  # lower-case scheme://host[:port], default ports left out
    hosts: frozenset[str]  # their host names: names this machine is also served under
    cors: CorsPolicy

    def allows(self, origin: str) -> bool:
        if self.any:
            return True
        key = _origin_key(origin)
        if key is None:
            return False
        return key in self.origins or key.split(":", 1)[0] in APP_SCHEMES

    def trusted_host(self, host: str) -> bool:
        if self.any:
            return True
        name = _host_name(host)
        return name is not None and (is_local_name(name) or name in self.hosts)


@functools.lru_cache(maxsize=8)
def policy_of(cors: CorsPolicy) -> Policy:
    origins = set()
    hosts = set()
    for origin in cors.allowed_origins:
        key = _origin_key(origin)
        if key is not None:
            origins.add(key)
            name = _host_name(urlsplit(key).netloc)
            if name:
                hosts.add(name)
    return Policy("*" in cors.allowed_origins, frozenset(origins), frozenset(hosts), cors)


def _origin_key(origin: str) -> str | None:
    """`scheme://host[:port]`, lower-case, without the scheme's default port; None: not one."""
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    if port is None or (parts.scheme, port) in (("http", 80), ("https", 443)):
        return f"{parts.scheme}://{host}"
    return f"{parts.scheme}://{host}:{port}"


def _host_name(netloc: str) -> str | None:
    try:
        name = urlsplit("//" + netloc).hostname
    except ValueError:
        return None
    return name.rstrip(".") if name else None


@functools.cache
def _own_names() -> frozenset[str]:
    names = {socket.gethostname().lower()}
    names.add(next(iter(names)).split(".", 1)[0])
    return frozenset(names)


def is_local_name(name: str) -> bool:
    """Whether `name` (a Host's, lower-case) is one no other site can point at this machine."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    return "." not in name or name.endswith(LOCAL_SUFFIXES) or name in _own_names()


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


def _referer_origin(referer: str | None) -> str | None:
    if not referer:
        return None
    return _origin_key(referer)


def _user_navigation(request: web.BaseRequest) -> bool:
    headers = request.headers
    return (
        request.method in ("GET", "HEAD")
        and headers.get("Sec-Fetch-Mode") == "navigate"
        and headers.get("Sec-Fetch-Dest") == "document"
        and headers.get("Sec-Fetch-User") == "?1"
    )


def navigable(path: str) -> bool:
    """Whether another site's link may lead to `path`: the UI, or a page that starts nothing."""
    return path in NAVIGABLE or path.startswith(NAVIGABLE_UNDER)


def check_browser(request: web.BaseRequest, cors: CorsPolicy) -> str | None:
    """None for a request that is no browser's or a page's own; the allowed origin of another
    site's request (its answer carries CORS headers); `Forbidden` for any other."""
    headers = request.headers
    origin = headers.get("Origin")
    site = headers.get("Sec-Fetch-Site")
    if origin is None and site is None:
        return None  # curl, SDKs, servers
    if request.path in OPEN_PATHS:
        return origin if origin is not None and policy_of(cors).allows(origin) else None
    policy = policy_of(cors)
    host = headers.get("Host", "")
    site = site.strip().lower() if site is not None else None
    if origin is None:
        if site == "none":
            return None  # typed in, a bookmark: the user's own doing
        if site == "same-origin":
            _check_host(policy, host)
            return None
        navigation = _user_navigation(request)
        if navigation and navigable(request.path):
            return None  # a link on another site to the UI, followed by the user
        seen = _referer_origin(headers.get("Referer"))
        if policy.any or (seen is not None and policy.allows(seen)):
            return None  # an allowed site's link, image or script: no CORS answer to give
        if navigation:
            raise Forbidden(
                f"cross-site navigation refused: {request.method} {request.path[:200]!r} may "
                "start, swap or stop models, so a link, form or window of another site may "
                "not lead there (only to swapd's UI and pages that start nothing); open it from "
                "swapd's own UI or type the address in",
                code="cross_origin",
            )
        raise Forbidden(
            f"cross-site request refused: Sec-Fetch-Site {(site or '')[:40]!r} (a page of another "
            "site; allow it in security.cors.allowedOrigins)",
            code="cross_origin",
        )
    if same_origin(origin, host) and site in (None, "same-origin", "none"):
        _check_host(policy, host)
        return None
    if policy.allows(origin):
        return origin
    if same_origin(origin, host):
        raise Forbidden(
            f"cross-site request refused: Sec-Fetch-Site {(site or '')[:40]!r} (a page of "
            "another site)",
            code="cross_origin",
        )
    raise Forbidden(
        f"cross-origin request refused: Origin {origin[:200]!r} is not this host "
        f"({host[:200]!r}) and not in security.cors.allowedOrigins",
        code="cross_origin",
    )


def _check_host(policy: Policy, host: str) -> None:
    if not policy.trusted_host(host):
        raise Forbidden(
            f"request refused: Host {host[:200]!r} is not a name of this machine (a DNS-"
            "rebinding page?); to serve browsers under it, add its origin to "
            "security.cors.allowedOrigins",
            code="cross_origin",
        )


def cors_headers(origin: str, cors: CorsPolicy, headers: CIMultiDict[str]) -> None:
    """What the answer to an allowed other site's request carries (the upstream's own
    `Access-Control-*` headers replaced: one set, swapd's, as llama-swap sends)."""
    for name in [k for k in headers if k.lower().startswith("access-control-")]:
        headers.popall(name, None)
    wildcard = "*" in cors.allowed_origins and not cors.allow_credentials
    headers["Access-Control-Allow-Origin"] = "*" if wildcard else origin
    if not wildcard:
        vary = headers.get("Vary")
        if vary is None:
            headers["Vary"] = "Origin"
        elif "origin" not in vary.lower():
            headers["Vary"] = f"{vary}, Origin"
    if cors.allow_credentials:
        headers["Access-Control-Allow-Credentials"] = "true"
    if cors.exposed_headers:
        headers["Access-Control-Expose-Headers"] = ", ".join(cors.exposed_headers)


def preflight(request: web.BaseRequest, cors: CorsPolicy) -> web.Response:
    """The answer to `OPTIONS`: without an `Origin` (no browser's), llama-swap's permissive
    one; a browser's preflight for an allowed origin, its CORS answer; for any other, 403."""
    origin = request.headers.get("Origin")
    headers: CIMultiDict[str] = CIMultiDict()
    if origin is None:
        headers["Access-Control-Allow-Origin"] = "*"
    else:
        policy = policy_of(cors)
        host = request.headers.get("Host", "")
        if same_origin(origin, host):
            _check_host(policy, host)
        elif not policy.allows(origin):
            raise Forbidden(
                f"cross-origin request refused: Origin {origin[:200]!r} is not in "
                "security.cors.allowedOrigins",
                code="cross_origin",
            )
        cors_headers(origin, cors, headers)
    asked = request.headers.get("Access-Control-Request-Headers", "")
    names = [n.strip() for n in asked.split(",") if n.strip() and set(n.strip()) <= _TOKEN_CHARS]
    allowed = ", ".join(cors.allowed_headers) or ", ".join(names) or DEFAULT_HEADERS
    headers["Access-Control-Allow-Methods"] = ", ".join(cors.allowed_methods) or DEFAULT_METHODS
    headers["Access-Control-Allow-Headers"] = allowed
    headers["Access-Control-Max-Age"] = str(cors.max_age)
    return web.Response(status=204, headers=headers)
