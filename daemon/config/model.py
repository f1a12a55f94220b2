"""The resolved swapd configuration: typed, immutable, defaults filled, macros expanded.

`loader.load_config()` builds these from a llama-swap YAML file; nothing else constructs them
except tests. Field names are Python's; `shape.py` declares the YAML keys they come from. What the
proxy needs of a model or a peer is the ipc structs themselves (`ModelRouting`, `RoutePeer`,
`Filters`), so the routing table is never a field-by-field copy.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...ipc import aliases
from ...ipc.routing_table import (
    CorsPolicy,
    Filters,
    HttpCall,
    ModelRouting,
    Profile,
    RoutePeer,
    RouteSelector,
)
from .floor.matrix_dsl import MatrixSet

# The defaults are declared with their keys.
from .shape import (
    DEFAULT_CAPTURE_BUFFER_MB,
    DEFAULT_CLIENT_BODY_MIN_RATE,
    DEFAULT_CLIENT_TIMEOUT,
    DEFAULT_DRAIN_CLIENT_TIMEOUT,
    DEFAULT_HEALTH_CHECK_TIMEOUT,
    DEFAULT_KV_CACHE_BUDGET_MB,
    DEFAULT_MAX_WAIT,
    DEFAULT_METRICS_MAX_IN_MEMORY,
    DEFAULT_START_PORT,
)

__all__ = [
    "BusyCheck",
    "BusyCount",
    "Config",
    "Filters",
    "Forced",
    "GroupConfig",
    "MatrixConfig",
    "ModelConfig",
    "ModelRouting",
    "PeerConfig",
    "Profile",
    "RouteSelector",
]

# llama-swap writes this `.*\.(js|...)$`; under `re.search` the leading `.*` matches the same
# paths and makes each search quadratic in the path's length.
DEFAULT_IGNORE_PATHS: tuple[str, ...] = (r"\.(js|json|css|png|gif|jpg|jpeg|ico|txt)$",)

COMFYUI_MIN_CONCURRENCY = 999


class Forced(msgspec.Struct, frozen=True):
    """A setting the loader overrode, kept so `check-config --print` can say what and why."""

    key: str
    value: Any
    reason: str


# `busyCheck` (sections/busy_check_fields.py reads it; machinery/busy_poller.py polls it).
DEFAULT_INTERVAL = 1.0
DEFAULT_TIMEOUT = 2.0
# A swap waits this long for a busy model at most, then goes ahead (a render of several minutes
# fits; a job that never ends does not hold the GPUs for ever).
DEFAULT_SWAP_WAIT = 600.0


class BusyCount(msgspec.Struct, frozen=True):
    """One number in the upstream's answer; the model is busy while any count is above 0.

    `json`: a dotted path into a JSON answer ("" is the answer itself); a list there counts its
    items (only those whose `where` field is true, when `where` is set), a number counts as itself.
    `metric`: a Prometheus metric in a text-format answer; its samples are summed.
    `label`: what one of them is, a singular noun ("running job"); an "s" is added for several.
    """

    label: str
    json: str | None = None
    where: str | None = None
    metric: str | None = None


class BusyCheck(msgspec.Struct, frozen=True):
    path: str
    counts: tuple[BusyCount, ...]
    interval: float = DEFAULT_INTERVAL  # seconds between polls while the model is ready
    timeout: float = DEFAULT_TIMEOUT  # one poll; no answer in time counts as idle
    swap_wait: float = DEFAULT_SWAP_WAIT  # how long a swap waits for the model to turn idle
    preset: str | None = None


class WakeProbe(msgspec.Struct, frozen=True, kw_only=True):
    """`wakeProbe`: the request that proves a woken model answers as it did before its sleep
    (docs/guides/sleep-and-wake.md, "Verified wakes"). With neither `expect` nor `match`, the
    answer its process gave before its first sleep is the one a wake must give again."""

    method: str = "POST"
    path: str = "/v1/chat/completions"
    body: str = ""  # JSON text ("": none)
    # Where in the JSON answer the compared value is (keys, list indices as digits); (): the body.
    json_path: tuple[str, ...] = ()
    expect: str | None = None  # the value must be exactly this
    match: str | None = None  # or match this regular expression (`re.search`)
    timeout: float = 60.0
    # The default chat probe, which no one wrote: a server that does not answer it is not
    # verified (a warning), where a written-out probe that fails fails the wake.
    default: bool = False


class KvCacheSetting(msgspec.Struct, frozen=True):
    """A model's `kvCache` (docs/guides/kv-cache.md): the calls that list its server's slots,
    save one slot's cache to a file and restore it, each bounded by its `timeout`. In the calls'
    endpoints and bodies `{id}` is the slot's id and `{file}` the file's name inside `dir`."""

    list: HttpCall
    save: HttpCall
    restore: HttpCall
    # The model's folder (`${KV_DIR}`): `kvCacheDir`/<the model id, made a safe name>.
    dir: str
    preset: str | None = None


class ModelConfig(ModelRouting, frozen=True, kw_only=True):
    """A local model: `ModelRouting`'s fields (id, aliases, limits, filters, ...) and these."""

    # argv, already comment-stripped, continuation-joined, macro-expanded and shell-split.
    cmd: tuple[str, ...]
    # argv of cmdStop with the literal "${PID}" left in place; the daemon fills it at stop time.
    cmd_stop: tuple[str, ...] | None
    proxy: str
    # None when the file says `none`: the model is ready as soon as its process runs.
    check_endpoint: str | None
    # ttl (in ModelRouting) is the effective TTL: globalTTL applied when the model sets none.
    unload_timeout: float
    health_check_timeout: float
    env: dict[str, str] = msgspec.field(default_factory=dict)
    # `weights`: weight files besides those `cmd` names (observe/page_cache.py).
    weights: tuple[str, ...] = ()
    # GPU indices or UUIDs as written; None = every GPU (llama-swap's one-at-a-time default).
    gpus: tuple[str, ...] | None = None
    # `gpus: auto`: placed by measured memory at each start (policy/eviction/memory.py); `gpus`
    # then holds the GPUs of one start (set by the scheduler), None in the config.
    gpus_auto: bool = False
    # `vram:` bytes on each GPU, the footprint until a measurement exists.
    vram: tuple[int, ...] | None = None
    # `gpus: {auto: [...]}`: the GPUs placement may choose from, as written; None = every GPU.
    gpus_allowed: tuple[str, ...] | None = None
    # The allocated ${PORT}, when the model's cmd uses it.
    port: int | None = None
    forced: tuple[Forced, ...] = ()
    # `busyCheck`: None = the model has none (the default: nothing asks its server).
    busy_check: BusyCheck | None = None
    # `maxWait` (seconds): how long a swap to it waits at most while a loaded model's queue is
    # served first (policy/collation.py).
    max_wait: float = DEFAULT_MAX_WAIT
    # `wakeProbe`: None = wakes are not verified (`off`, or the model has no `sleep`).
    wake_probe: WakeProbe | None = None
    # `kvCache`: None = the model has none (its conversation caches are lost with its process).
    kv_cache: KvCacheSetting | None = None


class GroupConfig(msgspec.Struct, frozen=True):
    members: tuple[str, ...]
    swap: bool = True
    exclusive: bool = True
    persistent: bool = False


class MatrixConfig(msgspec.Struct, frozen=True):
    """`routing.router.settings.matrix` (or the legacy top-level `matrix`), compiled."""

    # In the solver's order (`matrix_dsl.compile_sets`), identifiers resolved to model ids.
    sets: tuple[MatrixSet, ...]
    # model id -> cost of evicting it (vars resolved); a model not listed costs 1.
    evict_costs: dict[str, int] = msgspec.field(default_factory=dict)
    vars: dict[str, str] = msgspec.field(default_factory=dict)


# A peer needs nothing the proxy does not: the config holds the routing table's struct.
PeerConfig = RoutePeer


# `vramMargin` (gpu_fields.py): left free on each GPU a placement by memory uses.
DEFAULT_VRAM_MARGIN = 512 * 1024**2
# `ui.activity.session_id` (llama-swap's default) and `performance.every` (seconds, its default
# and its minimum).
DEFAULT_SESSION_HEADERS: tuple[str, ...] = ("X-Session-ID", "X-Litellm-Session-Id")
DEFAULT_PERFORMANCE_EVERY = 5.0


class Config(msgspec.Struct, frozen=True):
    models: dict[str, ModelConfig] = msgspec.field(default_factory=dict)
    health_check_timeout: int = DEFAULT_HEALTH_CHECK_TIMEOUT
    log_level: str = "info"
    # llama-swap's values; `upstream` and `both` also copy each model's output to circusd's stdout.
    log_to_stdout: str = "proxy"
    start_port: int = DEFAULT_START_PORT
    global_ttl: int = 0
    api_keys: tuple[str, ...] = ()
    include_aliases_in_list: bool = False
    # `ollamaAPI`: serve Ollama's API (docs/clients.md).
    ollama_api: bool = True
    # The activity log's size in memory (llama-swap's default; 0 or less means the default).
    metrics_max_in_memory: int = DEFAULT_METRICS_MAX_IN_MEMORY
    vram_margin: int = DEFAULT_VRAM_MARGIN
    # `logTimeFormat`, trimmed and lower-case (ipc/log_time.py); None: unset.
    log_time_format: str | None = None
    # Which router decides evictions: "group" (groups, the default) or "matrix".
    router: str = "group"
    # `captureBuffer` (MB) and `store.path` (absolute; "": the activity log is in memory only).
    capture_buffer: int = DEFAULT_CAPTURE_BUFFER_MB
    store_path: str = ""
    # `kvCacheDir` (absolute) and `kvCacheBudget` (MB): the models' saved conversation caches.
    kv_cache_dir: str = ""
    kv_cache_budget: int = DEFAULT_KV_CACHE_BUDGET_MB
    groups: dict[str, GroupConfig] = msgspec.field(default_factory=dict)
    matrix: MatrixConfig | None = None
    # routing.scheduler.settings.fifo.priority: model id -> priority (default 0, higher first).
    priority: dict[str, int] = msgspec.field(default_factory=dict)
    peers: dict[str, PeerConfig] = msgspec.field(default_factory=dict)
    ignore_paths: tuple[str, ...] = DEFAULT_IGNORE_PATHS
    preload: tuple[str, ...] = ()
    profiles: dict[str, Profile] = msgspec.field(default_factory=dict)
    selectors: dict[str, RouteSelector] = msgspec.field(default_factory=dict)
    # Where it was read from; "" for a config built in code.
    source: str = ""
    # Top-level settings the loader overrode (healthCheckTimeout below 15), with the reason.
    forced: tuple[Forced, ...] = ()
    # `ui.activity.session_id`: the headers llama-swap's UI shows as a request's session.
    session_headers: tuple[str, ...] = DEFAULT_SESSION_HEADERS
    # `performance`: the host and GPU sampler off, and its interval in seconds.
    performance_disabled: bool = False
    performance_every: float = DEFAULT_PERFORMANCE_EVERY
    # `learn.enabled` and `learn.prefetch`: the traffic learned (observe/learning.py), and the
    # likely next model's weight files read ahead.
    learn: bool = True
    learn_prefetch: bool = True
    # `clientBodyTimeout`, `sendTimeout` (seconds; 0: none) and `security.cors`.
    client_body_timeout: float = DEFAULT_CLIENT_TIMEOUT
    send_timeout: float = DEFAULT_CLIENT_TIMEOUT
    # `clientBodyMinRate` (bytes/s) and `drainClientTimeout` (seconds); 0: none.
    client_body_min_rate: float = DEFAULT_CLIENT_BODY_MIN_RATE
    drain_client_timeout: float = DEFAULT_DRAIN_CLIENT_TIMEOUT
    # `maxWait` (seconds): the top level's; each model's is `ModelConfig.max_wait`.
    max_wait: float = DEFAULT_MAX_WAIT
    cors: CorsPolicy = CorsPolicy()

    @property
    def models_to_stdout(self) -> bool:
        return self.log_to_stdout in ("upstream", "both")

    def resolve(self, name: str) -> ModelConfig | None:
        """A local model by id or alias (ids win, as in llama-swap)."""
        return aliases.resolve(name, ((m.id, m.aliases, m) for m in self.models.values()))
