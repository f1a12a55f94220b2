"""The config file's keys, declared once: each key's name as llama-swap writes it, its type and
bounds, and the llama-swap keys swapd accepts but does not act on.

`schema.py` derives the known-key tables (unknown keys, "did you mean", ignored-key warnings) from
these structs, and `typed.py` converts each section into them with msgspec after macro expansion,
so a wrong type or a value out of bounds is reported in one place. A field typed `Any` is read by
hand in `model_fields.py` or `top_fields.py`: those are llama-swap's quirks (`cmd` text to argv,
`env` as `NAME=value` strings, an alias written as a mapping, `gpus` as indices or UUIDs, ...).
A null value is the same as leaving the key out, as when llama-swap decodes onto its defaults.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec
from msgspec import Meta, field

# msgpack, which carries the config to the proxy, holds integers in 64 bits.
MIN_INT = -(2**63)
MAX_INT = 2**63 - 1
MAX_PORT = 65535


class Ignored:
    """Marks a llama-swap key swapd accepts (so a real llama-swap config loads) but ignores."""

    def __init__(self, note: str = "") -> None:
        self.note = note  # why, shown in the warning


class Expect:
    """What the value must be, in the error's words, where the type alone says too little."""

    def __init__(self, words: str) -> None:
        self.words = words


def _ignored(note: str) -> Any:
    return Annotated[Any, Ignored(note)]


Int = Annotated[int, Meta(le=MAX_INT)]
Count = Annotated[int, Meta(ge=0, le=MAX_INT)]
Seconds = Annotated[float, Meta(ge=0)]
Port = Annotated[int, Meta(ge=1, le=MAX_PORT)]
Texts = tuple[str, ...]
# Free-form values (metadata, setParams): anything YAML holds, as long as msgpack can carry it.
Free = dict[str, Any]

_NO_TIMEOUTS = "swapd's proxy uses its own upstream timeouts"


class Section(msgspec.Struct, frozen=True, rename="camel"):
    """A mapping in the file. `expected` words the error when the value is not a mapping."""

    expected: ClassVar[str] = "a mapping"


class PeerFilters(Section, frozen=True):
    strip_params: str | None = None
    strip_params_legacy: str | None = field(default=None, name="strip_params")  # still read
    set_params: Free | None = None


class ModelFilters(PeerFilters, frozen=True):
    set_params_by_id: _ignored("swapd applies stripParams and setParams only") = field(
        default=None, name="setParamsByID"
    )


class Compat(Section, frozen=True):
    ignore_websockets: bool | None = None


class Model(Section, frozen=True):
    expected: ClassVar[str] = "a mapping with at least cmd"

    cmd: str | None = None
    cmd_stop: str | None = None
    proxy: str | None = None
    check_endpoint: str | None = None
    ttl: Int | None = None
    unload_timeout: Seconds | None = None
    aliases: Any = None
    env: Any = None
    unlisted: bool | None = None
    use_model_name: str | None = None
    concurrency_limit: Count | None = None
    name: str | None = None
    description: str | None = None
    metadata: Free | None = None
    macros: Any = None
    gpus: Any = None
    vram: Any = None
    # client: the client's Host goes upstream (the default); upstream: the upstream's host:port.
    host_header: Literal["client", "upstream"] | None = None
    # A preset name or a mapping; its own keys are checked where it is read (busy_check.py).
    busy_check: Any = None
    compat: Compat | None = None
    filters: ModelFilters | None = None
    # Stream loading progress to a streaming chat request that waits for a start.
    send_loading_state: bool | None = None
    timeouts: _ignored(_NO_TIMEOUTS) = None
    capabilities: _ignored("swapd does not report capabilities in /v1/models") = None


class Group(Section, frozen=True):
    expected: ClassVar[str] = "a mapping with members"

    swap: bool | None = None
    exclusive: bool | None = None
    persistent: bool | None = None
    members: Texts | None = None


class Peer(Section, frozen=True):
    expected: ClassVar[str] = "a mapping with proxy and models"

    proxy: str | None = None
    api_key: str | None = None
    models: Texts | None = None
    filters: PeerFilters | None = None
    timeouts: _ignored(_NO_TIMEOUTS) = None


class Upstream(Section, frozen=True):
    ignore_paths: Texts | None = None


class OnStartup(Section, frozen=True):
    preload: Texts | None = None


class Hooks(Section, frozen=True):
    on_startup: OnStartup | None = field(default=None, name="on_startup")


class Store(Section, frozen=True):
    path: str | None = None


class Top(Section, frozen=True):
    health_check_timeout: Int | None = None
    log_level: str | None = None
    # What circusd's stdout (the journal under systemd) gets besides swapd's own lines.
    log_to_stdout: Literal["proxy", "upstream", "both", "none"] | None = None
    start_port: Port | None = None
    global_ttl: Count | None = field(default=None, name="globalTTL")
    unload_timeout: Seconds | None = None
    macros: Any = None
    api_keys: Texts | None = None
    include_aliases_in_list: bool | None = None
    models: Annotated[dict[str, Model], Expect("a mapping of model ids")] | None = None
    groups: dict[str, Group] | None = None
    peers: dict[str, Peer] | None = None
    upstream: Upstream | None = None
    hooks: Hooks | None = None
    # `auto`: every model that sets no `gpus` and is in no group is placed by memory.
    gpus: Literal["auto"] | None = None
    log_time_format: _ignored("swapd's log lines have their own format") = None
    log_requests: _ignored("deprecated in llama-swap too") = None
    metrics_max_in_memory: Int | None = None
    # MB for request/response captures (llama-swap's default 5; 0: none).
    capture_buffer: Count | None = None
    # Stream loading progress to a streaming chat request that waits for a start.
    send_loading_state: bool | None = None
    store: Store | None = None
    ui: _ignored("swapd has no web UI") = None
    performance: _ignored("swapd does not sample performance") = None
    profiles: _ignored(
        "profiles are not implemented; requests are routed by model id and alias"
    ) = None
    selectors: _ignored("selectors are not implemented") = None
    routing: _ignored("swapd routes with groups and gpus; set groups at the top level") = None
    matrix: _ignored("the matrix router is not implemented; use groups or gpus") = None
