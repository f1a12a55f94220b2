"""The resolved config as YAML, in llama-swap's key names, for `swapd check-config --print`.

Macros are expanded, defaults filled, `cmd` shown as the argv swapd will exec, and every setting the
loader forced carries a `# forced: <reason>` comment. API keys are never printed.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from . import shape
from .keys import shown
from .model import Config, Forced, ModelConfig
from .show import HIDDEN, filters, number

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
        "clientBodyTimeout": number(config.client_body_timeout),
        "sendTimeout": number(config.send_timeout),
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


def _model(model: ModelConfig) -> dict[str, Any]:
    return shown(shape.Model, model)


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
                "filters": filters(peer.filters),
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
