"""One model's typed section (`shape.Model`) to a `ModelConfig`: llama-swap's per-model quirks.

What is plain typing was checked by `typed.py`; what is left here is what llama-swap means by a
value: `cmd` text to argv, the default `proxy` that needs `${PORT}`, `checkEndpoint: none`,
`ttl: -1`, `0` meaning "the default", `env` as `NAME=value` strings, the mapping form of an
alias, `stripParams` as a comma list, `gpus` as indices or UUIDs, and the settings forced on
`comfyui_auto`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from ....ipc.reserved import COMFYUI_MODEL_ID
from ....ipc.routing_table import Capabilities, SleepSetting
from ....ipc.routing_table import Timeouts as RouteTimeouts
from .. import model as c
from .. import shape
from ..floor import keys
from ..floor.cmdline import split_command
from ..floor.issues import Report
from ..floor.typed import Converter
from ..floor.yaml_nodes import Path
from .busy_check_fields import read_busy_check
from .common import check_url, filters_of, name_problem
from .gpu_fields import vram_of
from .kv_cache_fields import read_kv_cache
from .sleep_fields import Timeouts as SleepTimeouts
from .sleep_fields import read_sleep
from .timeouts import timeouts_of
from .wake_probe_fields import DEFAULT as DEFAULT_WAKE_PROBE
from .wake_probe_fields import for_model, read_wake_probe

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Linux refuses to exec an argument over 128 KiB (MAX_ARG_STRLEN); a longer command is a mistake,
# and refusing it up front keeps shlex (quadratic on one long quoted word) out of the way.
MAX_COMMAND_LENGTH = 128 * 1024

# The seed page's reasons (seed/comfyui-endpoint.txt, "What llama-swap forces on comfyui_auto").
COMFYUI_WEBSOCKETS_REASON = (
    "comfyui_auto: a websocket connection does not start or queue the model, and does not count "
    "toward concurrency, in-flight requests, TTL activity, or swap decisions"
)
COMFYUI_CONCURRENCY_REASON = (
    "comfyui_auto: the per-model default is 10; one open ComfyUI tab makes many parallel asset "
    "and API requests"
)


# The model keys read by hand here, each by its quirk function (keys.resolve calls them in the
# order of shape.Model's fields).
QUIRKS = keys.Quirks(shape.Model)
QUIRKS.read("wake_probe")(read_wake_probe)


@dataclass(frozen=True)
class ModelDefaults:
    # The top level's resolved values that model keys inherit (`keys.Inherit`), by key name.
    inherited: Mapping[str, Any]
    health_check_timeout: float
    sleep_timeouts: SleepTimeouts = field(default_factory=SleepTimeouts)
    # `kvCacheDir`, absolute: each model with a `kvCache` has its folder there.
    kv_root: str = ""


def build(
    model_id: str,
    spec: shape.Model,
    raw: dict[str, Any],
    *,
    port: int | None,
    gpus: tuple[str, ...] | None,
    gpus_auto: bool = False,
    defaults: ModelDefaults,
    aliases: list[str],
    report: Report,
    errors_before: int,
) -> c.ModelConfig | None:
    """The model, or None when any of its settings was reported as an error since
    `errors_before` (its typed section and aliases are read first, by the caller)."""
    path = ("models", model_id)
    if raw.get("cmd") is None:
        report.error((*path, "cmd"), "cmd is required: the command that starts the model's server")
    cmd = command(spec.cmd, (*path, "cmd"), report, stop=False)
    proxy = spec.proxy
    if proxy is None:
        proxy = shape.DEFAULT_PROXY.replace("${PORT}", str(port)) if port else None
        if proxy is None and cmd is not None:
            report.error(
                (*path, "proxy"),
                "the default proxy http://localhost:${PORT} needs ${PORT} in cmd; "
                "use ${PORT} in cmd or set proxy",
            )
    elif "${" not in proxy:
        check_url(proxy, (*path, "proxy"), report)
    read = keys.resolve(spec, path, report, defaults.inherited, QUIRKS).fields
    sleep = read_sleep(spec, raw, path, report, defaults.sleep_timeouts)
    kv_cache = read_kv_cache(spec.kv_cache, raw, path, report, defaults.kv_root, model_id)
    if len(report.errors) > errors_before or cmd is None or proxy is None:
        return None

    read["wake_probe"] = _wake_probe(read["wake_probe"], sleep, read, model_id, path, report)
    ignore_websockets = bool(spec.compat and spec.compat.ignore_websockets)
    limit = read.pop("concurrency_limit")
    forced: list[c.Forced] = []
    if model_id == COMFYUI_MODEL_ID:
        if not ignore_websockets:
            ignore_websockets = True
            forced.append(c.Forced("compat.ignoreWebsockets", True, COMFYUI_WEBSOCKETS_REASON))
        if limit < c.COMFYUI_MIN_CONCURRENCY:
            limit = c.COMFYUI_MIN_CONCURRENCY
            forced.append(
                c.Forced("concurrencyLimit", c.COMFYUI_MIN_CONCURRENCY, COMFYUI_CONCURRENCY_REASON)
            )
    return c.ModelConfig(
        **read,
        id=model_id,
        cmd=cmd,
        proxy=proxy,
        health_check_timeout=defaults.health_check_timeout,
        concurrency_limit=limit,
        ignore_websockets=ignore_websockets,
        aliases=tuple(aliases),
        gpus=gpus,
        gpus_auto=gpus_auto,
        port=port,
        forced=tuple(forced),
        sleep=sleep,
        kv_cache=kv_cache,
    )


def _wake_probe(
    probe: c.WakeProbe | None,
    sleep: SleepSetting | None,
    read: Mapping[str, Any],
    model_id: str,
    path: Path,
    report: Report,
) -> c.WakeProbe | None:
    """What verifies the model's wakes: none without `sleep`; none by default for ComfyUI's
    preset (no chat API to ask); else the probe, asking for the model by the name its server
    knows it by."""
    if sleep is None:
        if probe is not None and probe is not DEFAULT_WAKE_PROBE:
            report.warn((*path, "wakeProbe"), "the model has no sleep setting: no wake to verify")
        return None
    if probe is DEFAULT_WAKE_PROBE and sleep.preset == "comfyui":
        return None
    return for_model(probe, read.get("use_model_name") or model_id)


def command(text: str | None, where: Path, report: Report, *, stop: bool) -> tuple[str, ...] | None:
    if text is None:
        return None
    if stop and not text.strip():
        return None  # llama-swap's default: "" means no cmdStop
    if len(text) > MAX_COMMAND_LENGTH:
        report.error(
            where,
            f"is {len(text)} characters long, over the limit of {MAX_COMMAND_LENGTH} "
            "(Linux refuses to start a command with an argument over 128 KiB)",
        )
        return None
    try:
        argv = split_command(text)
    except ValueError as error:
        report.error(where, f"cannot split into words: {error}")
        return None
    if not argv:
        report.error(where, "is empty (only blanks or comment lines)")
        return None
    return tuple(argv)


@QUIRKS.read("check_endpoint")
def _check_endpoint(value: str | None, where: Path, report: Report) -> str | None:
    if value is None:
        return shape.DEFAULT_CHECK_ENDPOINT
    value = value.strip()
    if value == "none":
        return None
    if not value.startswith("/"):
        # llama-swap loads it: its reverse proxy asks the upstream for the URL's path, or for
        # the text after a '/' of its own.
        parts = urlsplit(value)
        if parts.scheme and parts.netloc:
            sent = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            why = "the upstream is always the model's proxy, so only its path counts"
        else:
            sent, why = "/" + value, "a request path starts with '/'"
        report.warn(
            where,
            f"expected a path starting with '/' or 'none', got {value!r}: asks for "
            f"{sent!r} ({why})",
        )
        value = sent
    if any(ch.isspace() for ch in value):
        # llama-swap loads it and requests it percent-encoded; so does swapd (yarl quotes it).
        sent = quote(value, safe="/?&=%:@!$'()*+,;~")
        report.warn(
            where,
            f"{value!r} holds whitespace, which no request path has: the health check asks "
            f"for {sent!r}",
        )
    return value


def aliases_of(model_id: str, raw: list[Any] | None, report: Report) -> list[str]:
    """A model's aliases as names; the newer llama-swap form `{id, name, unlisted}` keeps its id."""
    where = ("models", model_id, "aliases")
    aliases: list[str] = []
    texts = Converter(report)
    for index, item in enumerate(raw or []):
        if isinstance(item, dict):
            extra = sorted(set(item) - {"id"})
            if extra:
                report.warn(
                    (*where, index), f"alias {', '.join(extra)} accepted but ignored by swapd"
                )
            if item.get("id") is None:
                report.error((*where, index), "an alias written as a mapping needs an id")
                continue
            item = item["id"]
        text = texts.text(item, (*where, index)) if item is not None else ""
        if text is None:
            continue
        if not text.strip():
            report.error((*where, index), "an alias cannot be empty")
            continue
        problem = name_problem(text, "an alias")
        if problem is not None:
            report.error((*where, index), problem)
            continue
        aliases.append(text)
    return aliases


@QUIRKS.read("env")
def _env(raw: list[Any] | None, where: Path, report: Report) -> dict[str, str]:
    env: dict[str, str] = {}
    for index, entry in Converter(report).text_list(raw, where):
        name, sep, val = entry.partition("=")
        if not sep or not _ENV_NAME.match(name):
            report.error(
                (*where, index), f"expected NAME=value with a variable name, got {entry!r}"
            )
            continue
        env[name] = val  # later entries win, as in llama-swap
    return env


MODALITIES = ("text", "audio", "image")


def capabilities_of(
    spec: shape.Capabilities | None, where: Path, report: Report
) -> Capabilities | None:
    if spec is None:
        return None
    for key, values in (("in", spec.inputs), ("out", spec.outputs)):
        for index, value in enumerate(values or ()):
            if value not in MODALITIES:
                report.error(
                    (*where, key, index),
                    f'capabilities.{key}: invalid modality "{value}", must be one of: '
                    + ", ".join(MODALITIES),
                )
    caps = Capabilities(
        inputs=tuple(spec.inputs or ()),
        outputs=tuple(spec.outputs or ()),
        tools=bool(spec.tools),
        reranker=bool(spec.reranker),
        context=spec.context or 0,
    )
    return None if caps == Capabilities() else caps


def by_id_names(model_id: str, spec: shape.Model) -> list[str]:
    """setParamsByID's names other than the model's own id: llama-swap makes them aliases."""
    names = (spec.filters.set_params_by_id or {}) if spec.filters else {}
    return [name for name in names if name != model_id]


@QUIRKS.read("cmd_stop")
def _cmd_stop(text: str | None, where: Path, report: Report) -> tuple[str, ...] | None:
    return command(text, where, report, stop=True)


@QUIRKS.read("timeouts")
def _timeouts(spec: shape.Timeouts | None, where: Path, report: Report) -> RouteTimeouts:
    return timeouts_of(spec, peer=False)


QUIRKS.read("filters")(filters_of)
QUIRKS.read("vram")(vram_of)
QUIRKS.read("capabilities")(capabilities_of)
QUIRKS.read("busy_check")(read_busy_check)
