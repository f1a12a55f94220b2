"""The resolved swapd configuration: typed, immutable, defaults filled, macros expanded.

`config_loader.load_config()` builds these from a llama-swap YAML file; nothing else constructs them
except tests. Field names are Python's; `docs/configuration.md` maps them to the YAML keys.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...ipc import aliases
from .busy_check import BusyCheck

# llama-swap's defaults (shared/reference/llama-swap.md §1.2, §1.3).
DEFAULT_HEALTH_CHECK_TIMEOUT = 120
MIN_HEALTH_CHECK_TIMEOUT = 15
DEFAULT_START_PORT = 5800
DEFAULT_CHECK_ENDPOINT = "/health"
DEFAULT_PROXY = "http://localhost:${PORT}"
DEFAULT_UNLOAD_TIMEOUT = 10
DEFAULT_CONCURRENCY_LIMIT = 10
DEFAULT_IGNORE_PATHS: tuple[str, ...] = (r".*\.(js|json|css|png|gif|jpg|jpeg|ico|txt)$",)

COMFYUI_MIN_CONCURRENCY = 999


class Forced(msgspec.Struct, frozen=True):
    """A setting the loader overrode, kept so `check-config --print` can say what and why."""

    key: str
    value: Any
    reason: str


class Filters(msgspec.Struct, frozen=True):
    strip_params: tuple[str, ...] = ()
    set_params: dict[str, Any] = msgspec.field(default_factory=dict)


class ModelConfig(msgspec.Struct, frozen=True):
    id: str
    # argv, already comment-stripped, continuation-joined, macro-expanded and shell-split.
    cmd: tuple[str, ...]
    # argv of cmdStop with the literal "${PID}" left in place; the daemon fills it at stop time.
    cmd_stop: tuple[str, ...] | None
    proxy: str
    # None when the file says `none`: the model is ready as soon as its process runs.
    check_endpoint: str | None
    # Effective TTL in seconds (globalTTL applied when the model sets none); 0 = never unload.
    ttl: int
    unload_timeout: float
    health_check_timeout: float
    concurrency_limit: int
    ignore_websockets: bool = False
    aliases: tuple[str, ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)
    unlisted: bool = False
    use_model_name: str | None = None
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    filters: Filters = msgspec.field(default_factory=Filters)
    # GPU indices or UUIDs as written; None = every GPU (llama-swap's one-at-a-time default).
    gpus: tuple[str, ...] | None = None
    # The allocated ${PORT}, when the model's cmd uses it.
    port: int | None = None
    forced: tuple[Forced, ...] = ()
    # `busyCheck`: None = the model has none (the default: nothing asks its server).
    busy_check: BusyCheck | None = None


class GroupConfig(msgspec.Struct, frozen=True):
    members: tuple[str, ...]
    swap: bool = True
    exclusive: bool = True
    persistent: bool = False


class PeerConfig(msgspec.Struct, frozen=True):
    proxy: str
    models: tuple[str, ...]
    api_key: str | None = None
    filters: Filters = msgspec.field(default_factory=Filters)


class Config(msgspec.Struct, frozen=True):
    models: dict[str, ModelConfig] = msgspec.field(default_factory=dict)
    health_check_timeout: int = DEFAULT_HEALTH_CHECK_TIMEOUT
    log_level: str = "info"
    start_port: int = DEFAULT_START_PORT
    global_ttl: int = 0
    api_keys: tuple[str, ...] = ()
    include_aliases_in_list: bool = False
    groups: dict[str, GroupConfig] = msgspec.field(default_factory=dict)
    peers: dict[str, PeerConfig] = msgspec.field(default_factory=dict)
    ignore_paths: tuple[str, ...] = DEFAULT_IGNORE_PATHS
    preload: tuple[str, ...] = ()
    # Where it was read from; "" for a config built in code.
    source: str = ""
    # Top-level settings the loader overrode (healthCheckTimeout below 15), with the reason.
    forced: tuple[Forced, ...] = ()

    def resolve(self, name: str) -> ModelConfig | None:
        """A local model by id or alias (ids win, as in llama-swap)."""
        model = self.models.get(name)
        if model is not None:
            return model
        return aliases.resolve(name, ((m.id, m.aliases, m) for m in self.models.values()))
