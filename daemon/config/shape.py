"""The config file's keys, declared once: each key's name as llama-swap writes it, its type and
bounds, its default or the top-level key it inherits, how `check-config --print` shows it (its
`Key`, floor/keys.py), and the llama-swap keys swapd accepts but does not act on.

`floor/schema.py` derives the known-key tables (unknown keys, "did you mean", ignored-key
warnings) from these structs, `floor/typed.py` converts each section into them with msgspec after
macro expansion, so a wrong type or a value out of bounds is reported in one place, and
`keys.resolve()` fills the defaults. A key whose `Key` has no default is read by hand in its
section's module (`sections/`): those are llama-swap's quirks (`cmd` text to argv, `env` as
`NAME=value` strings, an alias written as a mapping, `gpus` as indices or UUIDs, ...). A null
value is the same as leaving the key out, as when llama-swap decodes onto its defaults. The few
keys typed `Any` say why beside them: read before typing (macros, a model's `gpus`), or ignored.

A setting written as a preset name or a mapping (`sleep`, `busyCheck`, `kvCache`, `wakeProbe`)
has a strict section for its mapping form (`SleepMapping`, ...), and its calls one each
(`SleepCall`, `KvCall`): every wrong value in it is reported with its path, all at once, as
anywhere else in the file, and its section's quirk reads what was typed: the preset by name
(`floor/presets.py`), a path's `/`, a least number of seconds, the rules between its keys.

Over 400 lines on purpose: it is the declaration of every key, one field each, kept in one module
so that the whole file's keys read as one table (issue 36's design); splitting it would only
scatter them.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, get_args

from msgspec import Meta, field

from .floor import show
from .floor.issues import Report
from .floor.keys import (
    MAX_INT,
    Count,
    Exact,
    Expect,
    Falsy,
    Free,
    Ignored,
    Inherit,
    Int,
    Key,
    Port,
    Seconds,
    Section,
    Texts,
)
from .floor.yaml_nodes import Path

# llama-swap's defaults (shared/reference/llama-swap.md §1.2, §1.3).
DEFAULT_HEALTH_CHECK_TIMEOUT = 120
MIN_HEALTH_CHECK_TIMEOUT = 15
DEFAULT_START_PORT = 5800
DEFAULT_CHECK_ENDPOINT = "/health"
DEFAULT_PROXY = "http://localhost:${PORT}"
DEFAULT_UNLOAD_TIMEOUT = 10
DEFAULT_CONCURRENCY_LIMIT = 10
DEFAULT_METRICS_MAX_IN_MEMORY = 1000
DEFAULT_CAPTURE_BUFFER_MB = 5
# `clientBodyTimeout` and `sendTimeout`: nginx's defaults.
DEFAULT_CLIENT_TIMEOUT = 60.0
# `clientBodyMinRate` (bytes/s: Apache's `MinRate` default) and `drainClientTimeout` (seconds).
DEFAULT_CLIENT_BODY_MIN_RATE = 500.0
DEFAULT_DRAIN_CLIENT_TIMEOUT = 30.0
# `maxWait` (seconds): the collation window swapd always had.
DEFAULT_MAX_WAIT = 5.0
# The words of a wrong `vram` or `vramMargin` (a text's unit is read in gpu_fields.size_of).
SIZE_WORDS = "a size such as 24GiB, 512MiB or a byte count"
# The words of a wrong top-level `gpus` (its mapping's key and list are read in gpu_fields.py).
AUTO_WORDS = "auto, or auto: [GPU indices or UUIDs] to place only on those GPUs"
# `kvCacheBudget`: MB of saved conversation caches kept, all models together (oldest out first).
DEFAULT_KV_CACHE_BUDGET_MB = 20480


class PeerFilters(Section, frozen=True):
    strip_params: str | None = None
    strip_params_legacy: str | None = field(default=None, name="strip_params")  # still read
    set_params: Free | None = None


class ModelFilters(PeerFilters, frozen=True):
    # requested name -> params applied after setParams; each name is also an alias.
    set_params_by_id: dict[str, Free] | None = field(default=None, name="setParamsByID")


class Compat(Section, frozen=True):
    ignore_websockets: bool | None = None


class Timeouts(Section, frozen=True):
    """llama-swap's upstream transport timeouts, seconds (0: none); config/sections/timeouts.py."""

    connect: Seconds | None = None
    keepalive: Seconds | None = field(default=None, name="keepalive")
    response_header: Seconds | None = None
    tls_handshake: Seconds | None = None
    expect_continue: Seconds | None = None
    idle_conn: Seconds | None = None


class Capabilities(Section, frozen=True):
    inputs: Texts | None = field(default=None, name="in")
    outputs: Texts | None = field(default=None, name="out")
    tools: bool | None = None
    reranker: bool | None = None
    context: Count | None = None


# `busyCheck`'s presets, by name (sections/busy_check_fields.py holds what each one asks).
BusyPreset = Literal["comfyui", "llamacpp", "vllm"]
# `sleep`'s presets, by name (sections/sleep_fields.py holds what each one asks).
SleepPreset = Literal["vllm", "vllm-level2", "sglang", "comfyui", "cuda"]
# `kvCache`'s presets (sections/kv_cache_fields.py).
KvCachePreset = Literal["llama.cpp", "llamacpp"]

# -- The mapping forms of a model's settings (`sleep`, `busyCheck`, `kvCache`, `wakeProbe`) and of
# their calls: strict sections (an unknown key is an error, a number is no string's text). Their
# sections' quirks read what is typed: a preset by name, a path's '/', a least number of seconds
# and `.inf` (in their own words), and the rules between keys.

# Seconds as a setting's quirk reads them (its least, `.nan` and `.inf` are its words).
Number = int | float
SECONDS_WORDS = "seconds (a number)"
# A call's method (a written-out call's `method`; llmsnap's default POST when empty).
METHOD = Expect(message="invalid method {got} (must be GET, POST, PUT, PATCH)")
# A request's body: a mapping or list is sent as its JSON.
Body = Annotated[str | list[Any] | dict[str, Any], Expect("the request body as text")]


def _preset(names: Any) -> Expect:
    return Expect(message=f"expected a preset name ({', '.join(get_args(names))})")


class KvCall(Section, frozen=True):
    """A written-out call of `kvCache` (sections/kv_cache_fields.py)."""

    expected: ClassVar[str] = "'METHOD /path' or a mapping with endpoint"
    strict: ClassVar[bool] = True

    endpoint: Annotated[str, Expect("a path on the model's own server")] | None = None
    method: Annotated[str, METHOD, Falsy()] | None = None
    body: Body | None = None


class SleepCall(KvCall, frozen=True):
    """A written-out call of `sleep` (llmsnap's items; sections/sleep_calls.py)."""

    expected: ClassVar[str] = "a mapping with endpoint"

    endpoint: Annotated[str, Expect("an endpoint path")] | None = None
    # Seconds (llmsnap's 0: the default).
    timeout: Annotated[Number, Expect(SECONDS_WORDS)] | None = None


SLEEP_CALLS = "a list of calls (endpoint, ...)"
# A `sleep` mapping's calls: each a call or `"METHOD /path"`.
SleepCalls = Annotated[
    tuple[Annotated[str | SleepCall, Expect("a mapping with endpoint, or 'METHOD /path'")], ...],
    Expect(SLEEP_CALLS),
]
SleepSeconds = Annotated[Number, Expect(SECONDS_WORDS)]


class SleepMapping(Section, frozen=True):
    """`sleep` written as a mapping: a preset with some of its settings changed, or in full
    (sections/sleep_fields.py)."""

    strict: ClassVar[bool] = True

    preset: Annotated[str, _preset(SleepPreset)] | None = None
    sleep_endpoints: SleepCalls | None = None
    wake_endpoints: SleepCalls | None = None
    sleep_request_timeout: SleepSeconds | None = None
    wake_request_timeout: SleepSeconds | None = None
    stop_after: SleepSeconds | None = None
    serves_asleep: bool | None = None
    wake_on: (
        Annotated[
            tuple[Annotated[str, Expect("'METHOD /path' (e.g. 'POST /api/prompt')")], ...],
            Expect("a list of 'METHOD /path' patterns"),
        ]
        | None
    ) = None
    lock_timeout: SleepSeconds | None = None


class BusyCountMapping(Section, frozen=True):
    """One of a `busyCheck`'s counts (sections/busy_check_fields.py)."""

    expected: ClassVar[str] = "a mapping with json or metric, and label"
    strict: ClassVar[bool] = True

    json: Annotated[str, Expect("text")] | None = field(default=None, name="json")
    where: Annotated[str, Expect("text")] | None = None
    metric: Annotated[str, Expect("text")] | None = None
    label: Annotated[str, Expect("text")] | None = None


class BusyCheckMapping(Section, frozen=True):
    """`busyCheck` written as a mapping (sections/busy_check_fields.py)."""

    strict: ClassVar[bool] = True

    preset: Annotated[str, _preset(BusyPreset)] | None = None
    path: Annotated[str, Expect("a path starting with '/'")] | None = None
    count: (
        Annotated[tuple[BusyCountMapping, ...], Expect("a list of counts (json or metric, label)")]
        | None
    ) = None
    interval: SleepSeconds | None = None
    timeout: SleepSeconds | None = None
    swap_wait: SleepSeconds | None = None


class KvCacheMapping(Section, frozen=True):
    """`kvCache` written as a mapping (sections/kv_cache_fields.py)."""

    strict: ClassVar[bool] = True

    preset: Annotated[str, _preset(KvCachePreset)] | None = None
    list_call: Annotated[str | KvCall, Expect(KvCall.expected)] | None = field(
        default=None, name="list"
    )
    save: Annotated[str | KvCall, Expect(KvCall.expected)] | None = None
    restore: Annotated[str | KvCall, Expect(KvCall.expected)] | None = None
    timeout: Annotated[Number, Expect("seconds above 0")] | None = None


class WakeProbeMapping(Section, frozen=True):
    """`wakeProbe` written as a mapping (sections/wake_probe_fields.py)."""

    strict: ClassVar[bool] = True

    method: Annotated[str, Expect("one of GET, POST, PUT, PATCH")] | None = None
    path: Annotated[str, Expect("a path on the model's server")] | None = None
    body: Body | None = None
    expect: Annotated[str | int | float | bool, Expect("the answer as text")] | None = None
    match: Annotated[str | int | float | bool, Expect("a regular expression")] | None = None
    json_path: Annotated[str, Expect("a path like choices.0.text")] | None = None
    timeout: Annotated[Number, Expect("seconds above 0")] | None = None


def _ttl(value: int, where: Path, report: Report) -> None:
    if value < -1:
        report.error(
            where,
            f"must be 0 (never unload), seconds to stay idle, or -1 (use globalTTL), got {value}",
        )


class Model(Section, frozen=True):
    """A model's keys, in the order `check-config --print` shows them (then those it does not)."""

    expected: ClassVar[str] = "a mapping with at least cmd"

    cmd: Annotated[str, Key(render=show.cmd)] | None = None
    cmd_stop: Annotated[str, Key(render=show.cmd_stop)] | None = None
    proxy: Annotated[str, Key(render=show.proxy)] | None = None
    check_endpoint: Annotated[str, Key(render=show.check_endpoint)] | None = None
    # -1 (or unset): the top level's globalTTL; below -1: an error.
    ttl: Annotated[Int, Key(Inherit("globalTTL"), unset=(-1,), check=_ttl)] | None = None
    unload_timeout: (
        Annotated[Seconds, Key(Inherit("unloadTimeout"), unset=(0,), render=show.unload_timeout)]
        | None
    ) = None
    concurrency_limit: Annotated[Count, Key(DEFAULT_CONCURRENCY_LIMIT, unset=(0,))] | None = None
    compat: Annotated[Compat, Key(render=show.compat)] | None = None
    # client: the client's Host goes upstream (the default); upstream: the upstream's host:port.
    host_header: Annotated[Literal["client", "upstream"], Key("client")] | None = None
    # Stream loading progress to a streaming chat request that waits for a start.
    send_loading_state: Annotated[bool, Key(Inherit("sendLoadingState"))] | None = None
    # Seconds a swap to this model may wait while a loaded model's queue is served first
    # (collation); unset: the top level's maxWait.
    max_wait: Annotated[Seconds, Key(Inherit("maxWait"))] | None = None
    # Read at the macro stage (stages.expand_model: `${GPUS}`), before typing.
    gpus: Annotated[Any, Key(render=show.gpus)] = None
    # Names, or llama-swap's newer `{id, name, unlisted}`; read in model_fields.aliases_of.
    aliases: (
        Annotated[list[Any], Expect("a list of alias names"), Key(render=show.aliases)] | None
    ) = None
    # `NAME=value` texts (llama-swap's `[]string`): each item read as a text (a number with a
    # warning) and split by model_fields' quirk, whose warnings come in the order of the quirks.
    env: (
        Annotated[
            list[Any],
            Expect("a list of NAME=value strings (write `- NAME=value`)"),
            Key(render=show.env),
        ]
        | None
    ) = None
    unlisted: Annotated[bool, Key(False)] | None = None
    # Empty means unset, as in llama-swap (omitted from /v1/models, no rename upstream).
    use_model_name: Annotated[str, Key(None, unset=("",))] | None = None
    name: Annotated[str, Key(None, unset=("",))] | None = None
    description: Annotated[str, Key(None, unset=("",))] | None = None
    metadata: Annotated[Free, Key(factory=dict, unset=({},))] | None = None
    filters: Annotated[ModelFilters, Key(render=show.model_filters)] | None = None
    # One size, or one per GPU; each read in gpu_fields.vram_of.
    vram: Annotated[int | str | list[Any], Expect(SIZE_WORDS), Key(render=show.vram)] | None = None
    # A preset name or a mapping; read in busy_check_fields.py.
    busy_check: (
        Annotated[
            str | BusyCheckMapping,
            Expect(f"a preset name ({', '.join(get_args(BusyPreset))}) or a mapping"),
            Key(render=show.model_busy_check),
        ]
        | None
    ) = None
    # A preset name or a mapping, and llmsnap's three keys; read in sleep_fields.py, after its
    # rule "sleep or llmsnap's keys, not both", which runs before typing (sleep_fields.one_form).
    sleep: (
        Annotated[
            str | SleepMapping,
            Expect(f"a preset name ({', '.join(get_args(SleepPreset))}) or a mapping"),
            Key(render=show.model_sleep),
        ]
        | None
    ) = None
    # llmsnap's form of `sleep`: `enable` (or `disable`, checked in sleep_fields._llmsnap) and
    # its calls.
    sleep_mode: (
        Annotated[
            str, Expect(message="invalid sleepMode value {got}: must be enable or disable"), Exact()
        ]
        | None
    ) = None
    sleep_endpoints: Annotated[tuple[SleepCall, ...], Expect(SLEEP_CALLS)] | None = None
    wake_endpoints: Annotated[tuple[SleepCall, ...], Expect(SLEEP_CALLS)] | None = None
    # `off`, or the request that verifies a wake and its answer; read in wake_probe_fields.py.
    wake_probe: (
        Annotated[
            bool | str | WakeProbeMapping,
            Expect("off, or a mapping (path, body, expect, match, jsonPath, ...)"),
            Key(render=show.wake_probe),
        ]
        | None
    ) = None
    # A preset name (`llama.cpp`) or a mapping; its keys are read in kv_cache_fields.py.
    kv_cache: (
        Annotated[
            str | KvCacheMapping,
            Expect(f"a preset name ({', '.join(get_args(KvCachePreset))}) or a mapping"),
            Key(render=show.model_kv_cache),
        ]
        | None
    ) = None
    # Read at the macro stage (stages.expand_model), before typing: macros expand what is typed.
    macros: Any = None
    # Weight files besides those `cmd` names after -m/--model/--mmproj: read ahead into the page
    # cache when it is the likely next model, and measured there (observe/page_cache.py).
    weights: Annotated[Texts, Key(factory=tuple, unset=((),))] | None = None
    # nginx's `client_body_timeout` and `send_timeout`, in seconds (0: none; default 60).
    client_body_timeout: Seconds | None = None
    send_timeout: Seconds | None = None
    security: Security | None = None
    timeouts: Annotated[Timeouts, Key(render=None)] | None = None
    capabilities: Annotated[Capabilities, Key(render=None)] | None = None


class Group(Section, frozen=True):
    expected: ClassVar[str] = "a mapping with members"

    swap: bool | None = None
    exclusive: bool | None = None
    persistent: bool | None = None
    members: Texts | None = None


class Matrix(Section, frozen=True):
    expected: ClassVar[str] = "a mapping with sets"

    vars: dict[str, str] | None = None
    evict_costs: dict[str, Annotated[int, Meta(le=MAX_INT)]] | None = field(
        default=None, name="evict_costs"
    )
    # An ordered mapping of set name -> DSL; the order breaks ties between equal costs.
    sets: dict[str, str] | None = None


class RouterSettings(Section, frozen=True):
    groups: dict[str, Group] | None = None
    matrix: Matrix | None = None


class Router(Section, frozen=True):
    use: str | None = None
    settings: RouterSettings | None = None


class Fifo(Section, frozen=True):
    priority: dict[str, Int] | None = None


class SchedulerSettings(Section, frozen=True):
    fifo: Fifo | None = None


class SchedulerSpec(Section, frozen=True):
    use: str | None = None
    settings: SchedulerSettings | None = None


class Routing(Section, frozen=True):
    router: Router | None = None
    scheduler: SchedulerSpec | None = None


class Profile(Section, frozen=True):
    expected: ClassVar[str] = (
        "a mapping with description and pins (the legacy list syntax is no longer supported)"
    )

    description: str | None = None
    pins: dict[str, str | None] | None = None


class SelectorSettings(Section, frozen=True):
    spillover: Int | None = None


class Selector(Section, frozen=True):
    expected: ClassVar[str] = "a mapping with strategy and targets"

    strategy: str | None = None
    targets: Texts | None = None
    settings: SelectorSettings | None = None
    name: str | None = None
    description: str | None = None
    unlisted: bool | None = None
    metadata: Free | None = None


class Peer(Section, frozen=True):
    expected: ClassVar[str] = "a mapping with proxy and models"

    proxy: str | None = None
    api_key: str | None = None
    models: Texts | None = None
    filters: PeerFilters | None = None
    timeouts: Timeouts | None = None


class Upstream(Section, frozen=True):
    ignore_paths: Texts | None = None


class OnStartup(Section, frozen=True):
    preload: Texts | None = None


class Hooks(Section, frozen=True):
    on_startup: OnStartup | None = field(default=None, name="on_startup")


class Store(Section, frozen=True):
    path: str | None = None


class UiActivity(Section, frozen=True):
    # Request headers whose value the activity table shows as the session (observe_fields.py).
    session_id: Texts | None = field(default=None, name="session_id")


class Ui(Section, frozen=True):
    """llama-swap's `ui`: settings its web UI reads from the `uiConfig` event."""

    activity: UiActivity | None = None


class Performance(Section, frozen=True):
    """The host and GPU sampler (`/api/performance`, `llamaswap_*` on `/metrics`)."""

    disabled: bool | None = None
    # A Go duration ("5s", "1m"; an integer: nanoseconds), read in observe_fields.py; at least 5 s.
    every: Annotated[int | str, Expect("a duration such as 5s or 1m")] | None = None


class Learn(Section, frozen=True):
    """What swapd learns of the traffic (`daemon/observe/learning.py`); read in
    observe_fields.py."""

    enabled: bool | None = None
    # Read the likely next model's weight files into the page cache.
    prefetch: bool | None = None


class Cors(Section, frozen=True):
    """llama-swap's `security.cors` (read in security_fields.py)."""

    allowed_origins: Texts | None = None
    allow_credentials: bool | None = None
    allowed_methods: Texts | None = None
    allowed_headers: Texts | None = None
    exposed_headers: Texts | None = None
    max_age: Int | None = None


class Security(Section, frozen=True):
    cors: Cors | None = None


def _not_positive(value: int) -> bool:
    return value <= 0


class Top(Section, frozen=True):
    """The top level's keys, in the order `check-config --print` shows them (then the others).
    A plain key's resolved value is the `Config` field of the same name."""

    # Below 15: raised to 15 (forced); read in top_fields.py.
    health_check_timeout: Annotated[Int, Key()] | None = None
    log_level: Annotated[str, Key()] | None = None
    # What circusd's stdout (the journal under systemd) gets besides swapd's own lines.
    log_to_stdout: Annotated[Literal["proxy", "upstream", "both", "none"], Key("proxy")] | None = (
        None
    )
    start_port: Annotated[Port, Key(DEFAULT_START_PORT)] | None = None
    global_ttl: Annotated[Count, Key(0)] | None = field(default=None, name="globalTTL")
    include_aliases_in_list: Annotated[bool, Key(False)] | None = None
    # Ollama's API on the listen port (`/api/tags`, `/api/chat`, ...; default on).
    ollama_api: Annotated[bool, Key(True)] | None = field(default=None, name="ollamaAPI")
    # The activity log's size in memory; 0 or less: the default, as in llama-swap.
    metrics_max_in_memory: (
        Annotated[Int, Key(DEFAULT_METRICS_MAX_IN_MEMORY, unset=_not_positive)] | None
    ) = None
    # A size as `vram`'s (0 allowed); read in gpu_fields.margin_of.
    vram_margin: Annotated[int | str, Expect(SIZE_WORDS), Key()] | None = None
    # MB for request/response captures (llama-swap's default 5; 0: none).
    capture_buffer: Annotated[Count, Key(DEFAULT_CAPTURE_BUFFER_MB)] | None = None
    # nginx's `client_body_timeout` and `send_timeout`, in seconds (0: none; default 60).
    client_body_timeout: Annotated[Seconds, Key(DEFAULT_CLIENT_TIMEOUT)] | None = None
    send_timeout: Annotated[Seconds, Key(DEFAULT_CLIENT_TIMEOUT)] | None = None
    # Apache's `MinRate` for request bodies, bytes/s (0: none), and how long a drain waits for a
    # request its client holds up, seconds (0: no bound).
    client_body_min_rate: Annotated[Seconds, Key(DEFAULT_CLIENT_BODY_MIN_RATE)] | None = None
    drain_client_timeout: Annotated[Seconds, Key(DEFAULT_DRAIN_CLIENT_TIMEOUT)] | None = None
    # llama-swap #612's word: how long a swap waits, at most, while a loaded model's queue is
    # served first (policy/collation.py); each model's `maxWait` overrides it.
    max_wait: Annotated[Seconds, Key(DEFAULT_MAX_WAIT)] | None = None
    store: Annotated[Store, Key(render=show.store)] | None = None
    api_keys: Annotated[Texts, Key(render=show.api_keys)] | None = None
    security: Annotated[Security, Key(render=show.security)] | None = None
    models: (
        Annotated[dict[str, Model], Expect("a mapping of model ids"), Key(render=show.models)]
        | None
    ) = None
    # The legacy form of routing.router.settings.groups.
    groups: Annotated[dict[str, Group], Key(render=show.groups)] | None = None
    # The legacy top-level form of routing.router.settings.matrix.
    matrix: Annotated[Matrix, Key(render=show.matrix)] | None = None
    routing: Annotated[Routing, Key(render=show.routing)] | None = None
    peers: Annotated[dict[str, Peer], Key(render=show.peers)] | None = None
    upstream: Annotated[Upstream, Key(render=show.upstream)] | None = None
    hooks: Annotated[Hooks, Key(render=show.hooks)] | None = None
    # Only the default of the models' keys of the same names.
    unload_timeout: (
        Annotated[Seconds, Key(float(DEFAULT_UNLOAD_TIMEOUT), unset=(0,), own=False)] | None
    ) = None
    # Stream loading progress to a streaming chat request that waits for a start.
    send_loading_state: Annotated[bool, Key(False, own=False)] | None = None
    # Read at the macro stage (floor/macros.declare), before typing.
    macros: Any = None
    # `auto` (or `auto: [GPUs]`): placement by memory for every model that sets no `gpus` and is
    # in no group or matrix set; read in gpu_fields.allowed_of.
    gpus: Annotated[str | dict[str, Any], Expect(AUTO_WORDS)] | None = None
    # The timestamp of swapd's own log lines (ipc/log_time.py); unset: swapd's own.
    log_time_format: str | None = None
    log_requests: Annotated[Any, Ignored("deprecated in llama-swap too")] = None
    # llmsnap's: seconds each sleep (wake) call may take, unless it sets its own; its least (1 s)
    # and finite bound are llmsnap's words, in sleep_fields.request_timeout.
    sleep_request_timeout: Annotated[int | float, Expect("seconds (a number)")] | None = None
    wake_request_timeout: Annotated[int | float, Expect("seconds (a number)")] | None = None
    ui: Annotated[Ui, Key(render=show.ui)] | None = None
    performance: Annotated[Performance, Key(render=show.performance)] | None = None
    learn: Annotated[Learn, Key(render=show.learn)] | None = None
    # The folder of the models' saved conversation caches (`${KV_DIR}` is a folder of it per
    # model; read in kv_cache_fields.py) and the MB they may take, all models together.
    kv_cache_dir: Annotated[str, Key(render=show.kv_cache)] | None = None
    kv_cache_budget: Annotated[Count, Key(DEFAULT_KV_CACHE_BUDGET_MB, render=None)] | None = None
    profiles: dict[str, Profile] | None = None
    selectors: dict[str, Selector] | None = None
