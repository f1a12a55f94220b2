"""The resolved config as YAML, in llama-swap's key names, for `swapd check-config --print`.

Macros are expanded, defaults filled, `cmd` shown as the argv swapd will exec, and every setting the
loader forced carries a `# forced: <reason>` comment. API keys are never printed.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import yaml

from ...ipc.routing_table import HttpCall, SleepSetting
from .busy_check_fields import BusyCheck
from .model import Config, Filters, Forced, ModelConfig

HIDDEN = "(hidden)"
_KEY_LINE = re.compile(r"^( *)([A-Za-z_][A-Za-z0-9_]*):")


def render(config: Config) -> str:
    parts = [
        _dump(_top(config), config.forced),
    ]
    if config.models:
        parts.append("models:\n")
        for model in config.models.values():
            # The id line is dumped on its own: ids such as `org/model:q4` need YAML quoting.
            id_line = yaml.safe_dump({model.id: None}, width=1000).rstrip("\n")
            parts.append(f"  {id_line.removesuffix(' null')}\n")
            parts.append(_indent(_dump(_model(model), model.forced), "    "))
    else:
        parts.append("models: {}\n")
    rest = _rest(config)
    if rest:
        parts.append(_dump(rest, ()))
    return "".join(parts)


def _top(config: Config) -> dict[str, Any]:
    return {
        "healthCheckTimeout": config.health_check_timeout,
        "logLevel": config.log_level,
        "logToStdout": config.log_to_stdout,
        "startPort": config.start_port,
        "globalTTL": config.global_ttl,
        "includeAliasesInList": config.include_aliases_in_list,
        "ollamaAPI": config.ollama_api,
        "metricsMaxInMemory": config.metrics_max_in_memory,
        "vramMargin": config.vram_margin,  # bytes
        "captureBuffer": config.capture_buffer,
        "clientBodyTimeout": _number(config.client_body_timeout),
        "sendTimeout": _number(config.send_timeout),
        "clientBodyMinRate": _number(config.client_body_min_rate),
        "drainClientTimeout": _number(config.drain_client_timeout),
        **({"store": {"path": config.store_path}} if config.store_path else {}),
        "apiKeys": [HIDDEN for _ in config.api_keys],
        **_security(config),
    }


def _security(config: Config) -> dict[str, Any]:
    cors = config.cors
    return {
        "security": {
            "cors": {
                "allowedOrigins": list(cors.allowed_origins),
                "allowCredentials": cors.allow_credentials,
                "allowedMethods": list(cors.allowed_methods),
                "allowedHeaders": list(cors.allowed_headers),
                "exposedHeaders": list(cors.exposed_headers),
                "maxAge": cors.max_age,
            }
        }
    }


def _number(value: float) -> float | int:
    """30 rather than 30.0: the file said 30."""
    return int(value) if float(value).is_integer() else value


def _filters(filters: Filters) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "stripParams": ",".join(filters.strip_params),
        "setParams": dict(filters.set_params),
    }
    if filters.set_params_by_id:
        shown["setParamsByID"] = {k: dict(v) for k, v in filters.set_params_by_id.items()}
    return shown


def _model(model: ModelConfig) -> dict[str, Any]:
    body: dict[str, Any] = {
        "cmd": list(model.cmd),
        "cmdStop": list(model.cmd_stop) if model.cmd_stop is not None else None,
        "proxy": model.proxy,
        "port": model.port,
        "checkEndpoint": model.check_endpoint if model.check_endpoint is not None else "none",
        "ttl": model.ttl,
        "unloadTimeout": _number(model.unload_timeout),
        "healthCheckTimeout": _number(model.health_check_timeout),
        "concurrencyLimit": model.concurrency_limit,
        "compat": {"ignoreWebsockets": model.ignore_websockets},
        "hostHeader": model.host_header,
        "sendLoadingState": model.send_loading_state,
        "gpus": "auto" if model.gpus_auto else list(model.gpus) if model.gpus is not None else None,
        "aliases": list(model.aliases),
        "env": [f"{name}={value}" for name, value in model.env.items()],
        "unlisted": model.unlisted,
        "useModelName": model.use_model_name,
        "name": model.name,
        "description": model.description,
        "metadata": dict(model.metadata),
        "filters": _filters(model.filters),
    }
    if model.vram is not None:
        body["vram"] = list(model.vram)  # bytes on each GPU
    if model.gpus_allowed is not None:
        body["gpus"] = {"auto": list(model.gpus_allowed)}  # placed by memory, on these GPUs only
    if model.busy_check is not None:
        body["busyCheck"] = _busy_check(model.busy_check)
    if model.sleep is not None:
        body["sleep"] = _sleep(model.sleep)
    return body


def _sleep(setting: SleepSetting) -> dict[str, Any]:
    # A preset (or llmsnap's keys) spelled out: every call with its timeout.
    def calls(items: tuple[HttpCall, ...]) -> list[dict[str, Any]]:
        return [
            {"endpoint": c.endpoint, "method": c.method, "timeout": _number(c.timeout)}
            | ({"body": c.body} if c.body else {})
            for c in items
        ]

    return {
        **({"preset": setting.preset} if setting.preset else {}),
        "sleepEndpoints": calls(setting.sleep),
        "wakeEndpoints": calls(setting.wake),
        "stopAfter": _number(setting.stop_after),
        "servesAsleep": setting.serves_asleep,
    }


def _busy_check(check: BusyCheck) -> dict[str, Any]:
    # A preset spelled out: what `busyCheck: comfyui` stands for.
    counts = [
        {k: v for k, v in msgspec.structs.asdict(count).items() if v is not None}
        for count in check.counts
    ]
    return {
        "preset": check.preset,
        "path": check.path,
        "count": counts,
        "interval": _number(check.interval),
        "timeout": _number(check.timeout),
        "swapWait": _number(check.swap_wait),
    }


def _rest(config: Config) -> dict[str, Any]:
    rest: dict[str, Any] = {}
    if config.groups:
        rest["groups"] = {
            name: {
                "swap": group.swap,
                "exclusive": group.exclusive,
                "persistent": group.persistent,
                "members": list(group.members),
            }
            for name, group in config.groups.items()
        }
    if config.matrix is not None:
        rest["matrix"] = {
            "vars": dict(config.matrix.vars),
            "evict_costs": dict(config.matrix.evict_costs),
            "sets": {s.name: s.dsl for s in config.matrix.sets},
        }
    if config.priority:
        rest["routing"] = {"scheduler": {"settings": {"fifo": {"priority": dict(config.priority)}}}}
    if config.peers:
        rest["peers"] = {
            name: {
                "proxy": peer.proxy,
                "apiKey": HIDDEN if peer.api_key else None,
                "models": list(peer.models),
                "filters": _filters(peer.filters),
            }
            for name, peer in config.peers.items()
        }
    rest["upstream"] = {"ignorePaths": list(config.ignore_paths)}
    rest["hooks"] = {"on_startup": {"preload": list(config.preload)}}
    return rest


def _dump(data: dict[str, Any], forced: tuple[Forced, ...]) -> str:
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
    return _annotate(text, forced)


def _annotate(text: str, forced: tuple[Forced, ...]) -> str:
    """Append `# forced: reason` to the lines of forced keys (dotted key paths)."""
    if not forced:
        return text
    reasons = {f.key: f.reason for f in forced}
    stack: list[tuple[int, str]] = []
    lines = text.split("\n")
    for index, line in enumerate(lines):
        match = _KEY_LINE.match(line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(2)))
        reason = reasons.get(".".join(key for _, key in stack))
        if reason is not None:
            lines[index] = f"{line}  # forced: {reason}"
    return "\n".join(lines)


def _indent(text: str, prefix: str) -> str:
    return "".join(f"{prefix}{line}\n" if line else "\n" for line in text.rstrip("\n").split("\n"))
