"""Every message that crosses the daemon <-> proxy (and daemon <-> CLI) boundary.

Three channels, all ZeroMQ `ipc://` sockets in the run directory (see `endpoints.py`):

* requests: a DEALER (proxy, CLI) sends a `Request` to the daemon's ROUTER and gets exactly one
  `Reply` with the same `id`. Never REQ: a lost reply would wedge it.
* casts: fire-and-forget messages on the same DEALER/ROUTER pair (`Activity`, `Drained`, `Hello`);
  the daemon sends no reply.
* broadcasts: the daemon's PUB sends `Event`s to every proxy's SUB. Each carries the daemon's
  `instance` (changes on every daemon start) and a `seq` that grows by one per event; a subscriber
  that sees a gap or a new instance asks for a `Snapshot`.

All of them are tagged msgspec structs (`type` field = the class name); `codec.py` encodes them.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .activity import ActivityRecord, Capture, InFlight

ModelState = Literal["stopped", "starting", "ready", "draining", "stopping", "failed"]


class _Msg(msgspec.Struct, frozen=True, tag=True, tag_field="type"):
    pass


# --------------------------------------------------------------------------------------------------
# The routing table: what a proxy needs to route and admit requests without asking the daemon.


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


class RouteModel(ModelRouting, frozen=True, kw_only=True):
    upstream: str  # the model's `proxy` URL, e.g. http://localhost:5800


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


class LingeringProcess(msgspec.Struct, frozen=True):
    gpu: str
    pid: int
    used_bytes: int | None = None


class Lingering(msgspec.Struct, frozen=True):
    """A stopped model's port still listened on (a `docker run` without `cmdStop` leaves its
    container serving): who holds it, where the system shows it, and what to do about it."""

    port: int
    pid: int | None = None
    command: str | None = None
    message: str = ""


class Busy(msgspec.Struct, frozen=True):
    """What a model's `busyCheck` last found (its own server's work queue); None without one."""

    busy: bool
    jobs: int = 0
    message: str = ""  # "busy (upstream reports 1 running job)", "idle", ...
    since: float = 0.0  # wall clock: when the current busy, idle or failing spell began
    checked_at: float = 0.0  # wall clock of the last poll
    error: str = ""  # the last poll failed (counted as idle)
    holding: tuple[str, ...] = ()  # the targets of swaps that wait for it to turn idle
    hold_until: float = 0.0  # wall clock: when the last of them goes ahead anyway


class ModelStatus(msgspec.Struct, frozen=True):
    """One model's state as the daemon sees it; broadcast on every change and listed by `status`."""

    model: str
    state: ModelState
    upstream: str = ""
    pid: int | None = None
    port: int | None = None
    gpus: tuple[str, ...] = ()
    ttl: int = 0
    since: float = 0.0  # wall-clock time of the last state change
    last_activity: float = 0.0  # wall-clock time of the last reported activity
    ttl_left: float | None = None
    reason: str = ""  # why it is failed/stopped, when it is
    in_flight: int = 0
    # What still holds GPU memory after the model stopped (NVML's view).
    gpu_lingering: tuple[LingeringProcess, ...] = ()
    # Its port, still listened on after it stopped; set until the port is free again.
    lingering: Lingering | None = None
    # GPU placement by memory: the peak bytes learned per GPU UUID (any model), where that came
    # from ("measured", "vram hint", "unknown"; "" when not placed by memory), what is reserved
    # for its current run per GPU UUID, and whether it is placed by memory at all.
    footprint: dict[str, int] = msgspec.field(default_factory=dict)
    footprint_source: str = ""
    reserved: dict[str, int] = msgspec.field(default_factory=dict)
    placed_by_memory: bool = False
    # What its busyCheck says (None: it has none, or it is not ready).
    busy: Busy | None = None


class GpuInfo(msgspec.Struct, frozen=True):
    index: int
    uuid: str
    name: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    # Reserved for the models placed by memory (`gpus: auto`) running on it.
    reserved_bytes: int = 0


# --------------------------------------------------------------------------------------------------
# Requests (DEALER -> ROUTER); each gets one reply with the same id.


class Ensure(_Msg, frozen=True):
    """Make `model` (an id, never an alias) ready; the reply comes when it is, or when it failed."""

    id: int
    model: str
    proxy_id: str = ""


class Unload(_Msg, frozen=True):
    """Stop one model (`model` set) or every model (`model` None); the reply comes when done."""

    id: int
    model: str | None = None


class Status(_Msg, frozen=True):
    id: int


class Reload(_Msg, frozen=True):
    """Re-read the config file. Running models whose definition did not change stay loaded."""

    id: int


class Snapshot(_Msg, frozen=True):
    """Ask for the routing table and every model's state (a proxy that joined or missed events)."""

    id: int


class QueryActivity(_Msg, frozen=True):
    """`GET /api/metrics/activity`: the query string's pairs, validated by the daemon."""

    id: int
    query: tuple[tuple[str, str], ...] = ()


class QueryStats(_Msg, frozen=True):
    """`GET /api/metrics/stats?model=`."""

    id: int
    model: str = ""


class QueryMetrics(_Msg, frozen=True):
    """`GET /metrics`: the Prometheus exposition of every figure (the daemon's and the requests
    every proxy reported)."""

    id: int


class SetProfile(_Msg, frozen=True):
    """Make profile `name` the active one (None: no profile); `Ok` once the table says so."""

    id: int
    name: str | None = None


class QueryCapture(_Msg, frozen=True):
    """`GET /api/captures/{id}`: the capture of activity record `capture`."""

    id: int
    capture: int


Request = (
    Ensure
    | Unload
    | Status
    | Reload
    | Snapshot
    | QueryActivity
    | QueryStats
    | QueryMetrics
    | SetProfile
    | QueryCapture
)


# --------------------------------------------------------------------------------------------------
# Replies (ROUTER -> DEALER).


class Ready(_Msg, frozen=True):
    """Reply to `Ensure`: the model is ready at `upstream`."""

    id: int
    model: str
    upstream: str


class Ok(_Msg, frozen=True):
    id: int
    message: str = ""


class StatusReply(_Msg, frozen=True):
    id: int
    instance: str
    pid: int
    uptime: float
    models: tuple[ModelStatus, ...]
    gpus: tuple[GpuInfo, ...] = ()
    gpu_backend: str = ""
    # How many messages of each type the daemon has received since it started (observability, and
    # the proxy test that shows a ready model's requests cost no IPC).
    received: dict[str, int] = msgspec.field(default_factory=dict)


class SnapshotReply(_Msg, frozen=True):
    id: int
    instance: str
    seq: int
    table: RoutingTable
    models: tuple[ModelStatus, ...]
    # Model requests under way in every proxy (for `/api/events`' in-flight snapshot).
    in_flight: tuple[InFlight, ...] = ()


class Error(_Msg, frozen=True):
    """Any request that failed. `status` is the HTTP status a proxy should answer with."""

    id: int
    status: int
    code: str
    message: str
    log_tail: tuple[str, ...] = ()


class Document(_Msg, frozen=True):
    """A reply the proxy sends to its client as it is (JSON, Prometheus text)."""

    id: int
    body: bytes
    content_type: str = "application/json"


Reply = Ready | Ok | StatusReply | SnapshotReply | Error | Document


# --------------------------------------------------------------------------------------------------
# Casts (DEALER -> ROUTER, no reply).


class Hello(_Msg, frozen=True):
    """A proxy announces itself (at start and after a daemon restart); also sent as a heartbeat."""

    proxy_id: str
    pid: int


class Activity(_Msg, frozen=True):
    """Rate-limited: at most one per model per second from each proxy, and at once when the proxy's
    in-flight count for the model drops to zero. `in_flight` is that proxy's current count."""

    proxy_id: str
    model: str
    in_flight: int
    at: float  # wall-clock time of the last request start or finish


class Drained(_Msg, frozen=True):
    """A proxy's ack of `Draining`: it admits no new requests to `model` and has none in flight."""

    proxy_id: str
    model: str
    epoch: int


class ActivityReport(_Msg, frozen=True):
    """The activity records of requests a proxy finished, batched (at most every 100 ms), and
    its in-flight changes since the last batch: requests begun and still running (`started`), and
    the ids of earlier `started` ones that have finished (`ended`). A request that begins and ends
    between two batches only gives its record."""

    proxy_id: str
    records: tuple[ActivityRecord, ...] = ()
    started: tuple[InFlight, ...] = ()
    ended: tuple[str, ...] = ()
    # The captures of some of `records` (`captureBuffer`), each naming its record by index.
    captures: tuple[Capture, ...] = ()


class CancelInFlight(_Msg, frozen=True):
    """`POST /api/inflight/{id}/cancel` for a request another proxy process serves: the daemon
    passes it on to every proxy (`CancelRequested`)."""

    id: str


Cast = Hello | Activity | Drained | ActivityReport | CancelInFlight

Inbound = Request | Cast


# --------------------------------------------------------------------------------------------------
# Broadcasts (PUB -> SUB).


class TableChanged(_Msg, frozen=True):
    instance: str
    seq: int
    table: RoutingTable


class StateChanged(_Msg, frozen=True):
    instance: str
    seq: int
    status: ModelStatus


class Draining(_Msg, frozen=True):
    """Phase one of a stop: proxies stop admitting requests to `model` and ack with `Drained` once
    their in-flight requests for it have finished. Ignored websockets do not hold the drain."""

    instance: str
    seq: int
    model: str
    epoch: int


class ActivityAdded(_Msg, frozen=True):
    """Records the daemon stored (from any proxy), with their ids: every proxy's `/api/events`
    subscribers get an `activity` event for each. `records` holds each record's JSON as the
    event shows it, encoded once by the daemon: a proxy with a subscriber only wraps it in the
    frame, one with none does nothing with it."""

    instance: str
    seq: int
    records: tuple[bytes, ...]


class InFlightChanged(_Msg, frozen=True):
    """Requests begun (`upserts`) and finished (`removes`, ids), from any proxy."""

    instance: str
    seq: int
    upserts: tuple[InFlight, ...] = ()
    removes: tuple[str, ...] = ()


class CancelRequested(_Msg, frozen=True):
    """The proxy serving in-flight request `id` ends it."""

    instance: str
    seq: int
    id: str


Event = TableChanged | StateChanged | Draining | ActivityAdded | InFlightChanged | CancelRequested


class Timeouts(msgspec.Struct, frozen=True):
    """llama-swap's `timeouts` of a model or peer, in seconds; 0 means no limit. The defaults
    are llama-swap's (a peer's `response_header` is 60). docs/configuration.md, "timeouts"."""

    connect: float = 30.0
    keepalive: float = 30.0  # TCP keep-alive probes on an open connection
    response_header: float = 0.0  # from the request sent to the response head received
    tls_handshake: float = 10.0
    expect_continue: float = 1.0
    idle_conn: float = 90.0  # how long a kept-alive connection may sit unused in the pool


# --------------------------------------------------------------------------------------------------
# Swap records (the web UI's timeline, `GET /api/swaps`). Appended here, and to the unions below,
# so that other additions to this file merge cleanly.


class SwapRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One start, swap, stop or crash of a model, once it ended, with how long each phase took.

    `kind`: `start` (nothing evicted), `swap` (a start that stopped `evicted` first; their drain
    and stop phases are its own, the longest of those run side by side), `stop`, `crash` (a ready
    model's process exited on its own). `cause`: `request` (a request for `model`, or for
    `for_model` when it was swapped out for that one), `preload`, `adopted`, `unload`, `ttl`,
    `swap`, `reload`, `shutdown`, `crash`, `other`. `result`: `ok`, `failed` (the start failed:
    `reason` says why), `aborted`. `phases`: seconds of `drain`, `stop`, `start`, `health`."""

    id: int
    kind: str
    model: str
    cause: str
    began: float  # wall clock
    ended: float
    result: str = "ok"
    reason: str = ""  # the daemon's own words (the state change's reason)
    phases: dict[str, float] = msgspec.field(default_factory=dict)
    evicted: tuple[str, ...] = ()
    for_model: str = ""


class QuerySwaps(_Msg, frozen=True):
    """`GET /api/swaps`: the daemon's recent swap records (a `Document`)."""

    id: int


class SwapRecorded(_Msg, frozen=True):
    """A swap record the daemon just kept (`/api/events` type `swap`)."""

    instance: str
    seq: int
    record: SwapRecord


Request = Request | QuerySwaps  # type: ignore[misc]
Inbound = Request | Cast  # type: ignore[misc]
Event = Event | SwapRecorded  # type: ignore[misc]
