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

from typing import Annotated, Any, Literal

import msgspec

from .activity import Finished, InFlight
from .durations import MAX_DURATION_S
from .model_status import GpuInfo, ModelStatus
from .routing_table import RoutingTable
from .swap_record import SwapRecord

EnsureCause = Literal["request", "load"]


class _Msg(msgspec.Struct, frozen=True, tag=True, tag_field="type"):
    pass


# --------------------------------------------------------------------------------------------------
# Requests (DEALER -> ROUTER); each gets one reply with the same id.


class Ensure(_Msg, frozen=True):
    """Make `model` ready; the reply comes when it is, or when it failed. `cause`: a request
    waits for it, or an explicit load (`POST /api/models/load/<id>`, `swapd load`) asked for it
    (the swap log says which). `waits` False: nobody waits for the reply (`?wait=false`, the
    router's `/models/load`): its swap takes out no model in use (docs/swapping.md)."""

    id: int
    model: str
    proxy_id: str = ""
    cause: EnsureCause = "request"
    waits: bool = True


class Unload(_Msg, frozen=True):
    """Stop one model (`model` set) or every model (`model` None); the reply comes when done.
    `now` (`swapd unload --now`): a stop that must be quick, so what a model's server could hand
    back (its conversation caches, `kvCache`) is not saved first. `unless_in_use` (Ollama's
    `keep_alive: 0` with nothing to answer: an unload nobody waits for): a model in use (a
    request in flight or served in the last 3 s, or busy by its `busyCheck`) is not stopped now
    but unloads once it is no longer in use (as a request's `keep_alive: 0` would have it), one
    starting or waking for requests that wait for it is left to serve them, and the reply comes
    at once (docs/swapping.md, "No one client thrashes the GPU")."""

    id: int
    model: str | None = None
    now: bool = False
    unless_in_use: bool = False


class Sleep(_Msg, frozen=True):
    """Put `model` (an id or alias) to sleep; the reply (`Ok`, its message the state it ended
    in: `asleep`, or `stopped` when its sleep failed) comes when done."""

    id: int
    model: str


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


class QuerySwaps(_Msg, frozen=True):
    """`GET /api/swaps`: the daemon's recent swap records (a `Document`)."""

    id: int


class QueryPerformance(_Msg, frozen=True):
    """`GET /api/performance[?after=RFC3339]`: the sampler's host and GPU figures (a `Document`,
    503 while `performance.disabled`); asking starts the sampler."""

    id: int
    after: str = ""


class QueryHardware(_Msg, frozen=True):
    """`GET /api/hardware`: the host's hardware snapshot (a `Document`)."""

    id: int


Request = (
    Ensure
    | Unload
    | Sleep
    | Status
    | Reload
    | Snapshot
    | QueryActivity
    | QueryStats
    | QueryMetrics
    | SetProfile
    | QueryCapture
    | QuerySwaps
    | QueryPerformance
    | QueryHardware
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
    # `/api/events` clients by proxy, as their Hellos said (activity is announced while there
    # is one).
    watching: dict[str, int] = msgspec.field(default_factory=dict)
    # The performance sampler: whether it samples now (only while someone reads), and how many
    # samples it took since the daemon started.
    performance: dict[str, Any] = msgspec.field(default_factory=dict)


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
    """A reply the proxy sends to its client as it is (JSON, Prometheus text), with `status`."""

    id: int
    body: bytes
    content_type: str = "application/json"
    status: int = 200


Reply = Ready | Ok | StatusReply | SnapshotReply | Error | Document


# --------------------------------------------------------------------------------------------------
# Casts (DEALER -> ROUTER, no reply).


class Hello(_Msg, frozen=True):
    """A proxy announces itself (at start and after a daemon restart); also sent as a heartbeat,
    and at once when its count of `/api/events` clients goes from none to some or back
    (`watching`: the daemon announces new activity and renders in-flight frames only while
    some proxy has one)."""

    proxy_id: str
    pid: int
    watching: int = 0


class Activity(_Msg, frozen=True):
    """Rate-limited: at most one per model per second from each proxy, plus its edges: at once when
    the proxy's in-flight count for the model turns non-zero, once it stayed zero `IDLE_EDGE_S`
    after it dropped there (`ipc/timings.py`), and at once when it handled a `Ready`.
    `in_flight` is that proxy's current count; `claimed`: how many `Ready` replies for the model
    it handled since its last report (admitted, then counted in `in_flight`, or not taken), which
    the daemon held the model for until now (docs/architecture.md, "Ready and drain").
    `websockets`: the websockets it relays to the model outside admission (ignored ones, and those
    an asleep server serves) open now, sent at once when it turns zero or non-zero: an asleep
    model is not stopped for its `sleep.stopAfter` while one is open (an open tab)."""

    proxy_id: str
    model: str
    in_flight: int
    at: float  # wall-clock time of the last request start or finish
    claimed: int = 0
    websockets: int = 0


class Drained(_Msg, frozen=True):
    """A proxy's ack of `Draining`: it admits no new requests to `model` and has none in flight."""

    proxy_id: str
    model: str
    epoch: int


class KeepAlive(_Msg, frozen=True):
    """How long the current run of `model` (an id) stays loaded once idle, as a request asked
    (Ollama's `keep_alive`), in place of its `ttl`: `seconds` > 0 that long, 0 unloads it as soon
    as nothing is in flight, < 0 never by TTL; None returns to the config's `ttl`. Sent once the
    model answered, so it is running; the daemon ties it to that run's process, so the next run
    starts from its `ttl` again. The last one the daemon receives wins. Never longer than Go's
    longest duration (Ollama's bound): the proxy refuses a longer one with a 400."""

    proxy_id: str
    model: str
    seconds: Annotated[float, msgspec.Meta(le=MAX_DURATION_S)] | None = None


class ActivityReport(_Msg, frozen=True):
    """The requests a proxy finished, batched (at most every 100 ms), and its in-flight changes
    since the last batch: requests begun and still running (`started`), and the ids of earlier
    `started` ones that have finished (`ended`). A request that begins and ends between two
    batches only gives its record. `clock` is the proxy's wall clock minus its loop clock when
    it sent the batch (`Finished.started` + `clock` = the wall-clock arrival).

    `records` are array-like `Finished`: a report from a proxy of another swapd version (whose
    records are shaped otherwise) fails to decode and is refused as a whole, counted in
    `received["invalid"]`, never misread (the daemon and its proxies run from one install)."""

    proxy_id: str
    records: tuple[Finished, ...] = ()
    started: tuple[InFlight, ...] = ()
    ended: tuple[str, ...] = ()
    clock: float = 0.0


class CancelInFlight(_Msg, frozen=True):
    """`POST /api/inflight/{id}/cancel` for a request another proxy process serves: the daemon
    passes it on to every proxy (`CancelRequested`)."""

    id: str


class GaveUp(_Msg, frozen=True):
    """The request that sent `Ensure` `id` on this connection gave up (its client went away):
    nobody waits for that reply any more, so its swap counts one waiter less (a swap nobody
    waits for takes out no model in use: docs/swapping.md)."""

    id: int


Cast = Hello | Activity | Drained | KeepAlive | ActivityReport | CancelInFlight | GaveUp

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
    """Records the daemon stored (from any proxy): ids `first` to `first + count - 1`. Every
    proxy's `/api/events` subscribers get llama-swap's `activity` event, `{"id"}`, for each (the
    proxy renders them, `event_frames.activity_frames`); the records themselves are read from the
    activity API, as llama-swap's UI reads them."""

    instance: str
    seq: int
    first: int
    count: int


class InFlightChanged(_Msg, frozen=True):
    """Requests begun (`upserts`) and finished (`removes`, ids), from any proxy; `frames` is
    their `count` `/api/events` frames, rendered once by the daemon."""

    instance: str
    seq: int
    upserts: tuple[InFlight, ...] = ()
    removes: tuple[str, ...] = ()
    frames: bytes = b""
    count: int = 0


class CancelRequested(_Msg, frozen=True):
    """The proxy serving in-flight request `id` ends it."""

    instance: str
    seq: int
    id: str


class SwapRecorded(_Msg, frozen=True):
    """A swap record the daemon just kept (`/api/events` type `swap`)."""

    instance: str
    seq: int
    record: SwapRecord


Event = (
    TableChanged
    | StateChanged
    | Draining
    | ActivityAdded
    | InFlightChanged
    | CancelRequested
    | SwapRecorded
)
