"""The routing table: what a proxy needs to route and admit requests without asking the daemon.

The daemon's config holds some of these very structs (`ModelRouting`, `RoutePeer`, `Timeouts`,
...); the table reaches every proxy in `SnapshotReply` and `TableChanged` (`messages.py`).
"""

from __future__ import annotations

from typing import Any

import msgspec


class Timeouts(msgspec.Struct, frozen=True):
    """llama-swap's `timeouts` of a model or peer, in seconds; 0 means no limit. The defaults
    are llama-swap's (a peer's `response_header` is 60). docs/configuration.md, "timeouts"."""

    connect: float = 30.0
    keepalive: float = 30.0  # TCP keep-alive probes on an open connection
    response_header: float = 0.0  # from the request sent to the response head received
    tls_handshake: float = 10.0
    expect_continue: float = 1.0
    idle_conn: float = 90.0  # how long a kept-alive connection may sit unused in the pool


class CorsPolicy(msgspec.Struct, frozen=True):
    """llama-swap's `security.cors`: the other sites whose pages may use swapd from a browser, and
    the CORS headers they are answered with (docs/endpoints.md, "Browsers and other sites").
    Unlike llama-swap's, an empty `allowed_origins` allows no other site (only the editors' and
    apps' own origins that no web page can have); `*` allows every site, llama-swap's default."""

    allowed_origins: tuple[str, ...] = ()
    allow_credentials: bool = False
    allowed_methods: tuple[str, ...] = ()  # a preflight's answer; () is llama-swap's list
    allowed_headers: tuple[str, ...] = ()  # a preflight's answer; (): the ones it asked for
    exposed_headers: tuple[str, ...] = ()
    max_age: int = 86400  # seconds a browser keeps a preflight's answer


class Filters(msgspec.Struct, frozen=True):
    """Body rewrites before a request is forwarded (a model's or a peer's `filters`)."""

    strip_params: tuple[str, ...] = ()
    set_params: dict[str, Any] = msgspec.field(default_factory=dict)
    # The name the client asked for -> params set after `set_params` (a model's setParamsByID).
    set_params_by_id: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)


class Capabilities(msgspec.Struct, frozen=True):
    """A model's `capabilities` (llama-swap's), rendered into `/v1/models` by the proxy."""

    inputs: tuple[str, ...] = ()  # `in`: text, audio, image
    outputs: tuple[str, ...] = ()  # `out`
    tools: bool = False
    reranker: bool = False
    context: int = 0


class HttpCall(msgspec.Struct, frozen=True):
    """One request a sleep or a wake sends to the model's own server: `method` `endpoint` (path and
    query, below the model's `proxy` URL), `body` sent as JSON when not empty, answered 2xx within
    `timeout` seconds (llmsnap's `sleepEndpoints` item)."""

    endpoint: str
    method: str = "POST"
    body: str = ""
    timeout: float = 10.0


class WakeRule(msgspec.Struct, frozen=True):
    """One `wakeOn` entry: a request whose method is `method` (`*`: any) and whose path on the
    model's own server (decoded, without the query) matches `path` as a whole (a regular
    expression) wakes an asleep server that keeps serving (`SleepSetting.serves_asleep`)."""

    method: str
    path: str


class SleepSetting(msgspec.Struct, frozen=True):
    """A model's `sleep` (or llmsnap's `sleepMode: enable` with `sleepEndpoints` and
    `wakeEndpoints`): how its server gives its GPU memory back without exiting, and takes it
    back (docs/guides/sleep-and-wake.md)."""

    sleep: tuple[HttpCall, ...]
    wake: tuple[HttpCall, ...] = ()
    preset: str = ""  # the preset it came from ("": written out, or llmsnap's keys)
    # Asleep and unused this many seconds: stopped (0: never).
    stop_after: float = 0.0
    # Its server keeps serving what needs no GPU while asleep (ComfyUI's page, assets, websocket
    # and GET polls): the proxy forwards those without waking it.
    serves_asleep: bool = False
    # With `serves_asleep`, the requests that wake it (`wakeOn`); the rest are served asleep.
    # None: every request but a GET or HEAD (a websocket never wakes it).
    wake_on: tuple[WakeRule, ...] | None = None


class ModelRouting(msgspec.Struct, frozen=True, kw_only=True):
    """What a proxy routes and admits a local model by. Declared once: the daemon's `ModelConfig`
    extends it with what only the daemon needs, and `RouteModel` adds the upstream address."""

    id: str
    concurrency_limit: int
    ttl: int
    aliases: tuple[str, ...] = ()
    unlisted: bool = False
    use_model_name: str | None = None
    ignore_websockets: bool = False
    # "client": the client's Host goes upstream unchanged; "upstream": the upstream's host:port.
    host_header: str = "client"
    # `sendLoadingState` (the model's, else the top level's): loading progress for a streaming chat.
    send_loading_state: bool = False
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    filters: Filters = msgspec.field(default_factory=Filters)
    capabilities: Capabilities | None = None  # None: not configured (or all empty)
    # `timeouts` (llama-swap's, with its defaults), for the proxy's connections to the upstream.
    timeouts: Timeouts = msgspec.field(default_factory=lambda: Timeouts())
    # `sleep`: None when the model has none (then it is stopped, never put to sleep).
    sleep: SleepSetting | None = None


class RouteModel(ModelRouting, frozen=True, kw_only=True):
    upstream: str  # the model's `proxy` URL, e.g. http://localhost:5800
    cmd: str = ""  # its command line, shell-quoted (llama-swap's `/running` lists it)


class RoutePeer(msgspec.Struct, frozen=True):
    """A `peers` entry; the config holds these very structs."""

    id: str
    proxy: str
    models: tuple[str, ...]
    api_key: str | None = None
    filters: Filters = msgspec.field(default_factory=Filters)
    # A peer's `timeouts`: llama-swap's defaults, but 60 s for the response head.
    timeouts: Timeouts = msgspec.field(default_factory=lambda: Timeouts(response_header=60.0))


class Profile(msgspec.Struct, frozen=True):
    """A `profiles` entry: while it is active, a request for a pin's name goes to its target;
    an empty target makes that name answer 404."""

    id: str
    description: str = ""
    pins: dict[str, str] = msgspec.field(default_factory=dict)


class RouteSelector(msgspec.Struct, frozen=True):
    """A `selectors` entry: a name that picks one of its targets per request. Targets are
    resolved (a local model id, or a peer model's `peer/model`)."""

    id: str
    strategy: str  # warm, pin, spillover
    targets: tuple[str, ...]
    spillover: int = 1
    name: str | None = None
    description: str | None = None
    unlisted: bool = False
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class RoutingTable(msgspec.Struct, frozen=True):
    generation: int
    models: tuple[RouteModel, ...] = ()
    peers: tuple[RoutePeer, ...] = ()
    api_keys: tuple[str, ...] = ()
    ignore_paths: tuple[str, ...] = ()
    include_aliases_in_list: bool = False
    log_dir: str = ""
    # The config's `logLevel` (debug, info, warn, error): the proxy's access log follows it.
    log_level: str = "info"
    profiles: tuple[Profile, ...] = ()
    selectors: tuple[RouteSelector, ...] = ()
    # At most one, set by `PUT /api/profiles/active` (`SetProfile`); none after start or reload.
    active_profile: str | None = None
    # The config's `logTimeFormat` (ipc/log_time.py): the proxies' log lines follow it.
    log_time_format: str | None = None
    # `captureBuffer` in bytes: the bound of one capture and of all of them (0: no captures).
    capture_bytes: int = 0
    # `ollamaAPI`: Ollama's API (`/api/tags`, `/api/chat`, ...) is served (docs/clients.md).
    ollama_api: bool = True
    # `ui.activity.session_id`: what llama-swap's web UI reads in the `uiConfig` event.
    session_headers: tuple[str, ...] = ("X-Session-ID", "X-Litellm-Session-Id")
    # `clientBodyTimeout` and `sendTimeout` (nginx's `client_body_timeout`, `send_timeout`), in
    # seconds, 0: none: how long a request body may stall, and a response go unread.
    client_body_timeout: float = 60.0
    send_timeout: float = 60.0
    # `clientBodyMinRate`: past `client_body_timeout`, a body must average this many bytes/s
    # (Apache's `MinRate`); `drainClientTimeout`: how long a drain waits for a request its client
    # holds up (seconds). 0: none.
    client_body_min_rate: float = 500.0
    drain_client_timeout: float = 30.0
    # `security.cors`: which other sites' pages may use swapd, and their CORS answers.
    cors: CorsPolicy = CorsPolicy()
