"""Load a llama-swap YAML config into swapd's immutable `Config`, or fail with every problem.

Pipeline (llama-swap's order, reference §1.1 and §1.5): parse with line marks; strip comment lines
from `cmd`/`cmdStop`; `${env.NAME}`; global macros over top-level values; per model the macro scope,
then `${GPUS}`, then `${PORT}` (allocated from `startPort` in sorted id order, only for models whose
cmd uses it); the leftover-macro check; typed reads with defaults; cross checks (aliases, groups,
peers); the forced settings of `comfyui_auto`. Nothing here raises anything but `ConfigError`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any
from urllib.parse import urlsplit

from ...ipc.reserved import COMFYUI_MODEL_ID
from . import macros
from . import model as c
from .busy_check import read_busy_check
from .cmdline import split_command, strip_comment_lines
from .issues import ConfigError, ConfigIssue, Report, describe
from .schema import TOP_LEVEL, KeyCheck, suggest
from .values import Reader
from .yaml_nodes import Document, Path, YamlSyntaxError, parse

__all__ = ["ConfigError", "ConfigIssue", "Loaded", "load", "load_config", "load_config_text"]

log = logging.getLogger("swapd.config")

LOG_LEVELS = ("debug", "info", "warn", "error")
MAX_PORT = 65535
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_REF_NAME = re.compile(r"^env\.[A-Za-z_][A-Za-z0-9_]*$")

# The seed page's reasons (seed/comfyui-endpoint.txt, "What llama-swap forces on comfyui_auto").
COMFYUI_WEBSOCKETS_REASON = (
    "comfyui_auto: a websocket connection does not start or queue the model, and does not count "
    "toward concurrency, in-flight requests, TTL activity, or swap decisions"
)
COMFYUI_CONCURRENCY_REASON = (
    "comfyui_auto: the per-model default is 10; one open ComfyUI tab makes many parallel asset "
    "and API requests"
)
HEALTH_CHECK_REASON = (
    f"healthCheckTimeout is never below {c.MIN_HEALTH_CHECK_TIMEOUT} s (llama-swap's minimum)"
)


@dataclass(frozen=True)
class Loaded:
    config: c.Config
    # llama-swap keys accepted but ignored, and other things worth a look; never fatal.
    warnings: tuple[ConfigIssue, ...]


def load_config(
    path: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
    ports: Mapping[str, int] | None = None,
) -> c.Config:
    """Load a config file. Raises ConfigError (never another exception) when it cannot be used."""
    loaded = load(path, environ=environ, ports=ports)
    for warning in loaded.warnings:
        log.warning("%s", warning)
    return loaded.config


def load_config_text(
    text: str, source: str = "config.yaml", *, environ: Mapping[str, str] | None = None
) -> c.Config:
    """Load config text; `source` is the file name the errors show."""
    return load_text(text, source, environ=environ).config


def load(
    path: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
    ports: Mapping[str, int] | None = None,
) -> Loaded:
    """Load a config file, keeping the warnings. `ports` (model id -> port) are `${PORT}`s that
    carry over from the config this one replaces (see `_allocate_ports`)."""
    source = os.fspath(path)
    try:
        text = FsPath(source).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            [
                ConfigIssue(
                    source, None, "", f"cannot read config file: not UTF-8 text ({error.reason})"
                )
            ]
        ) from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise ConfigError(
            [ConfigIssue(source, None, "", f"cannot read config file: {reason}")]
        ) from None
    return load_text(text, source, environ=environ, ports=ports)


def load_text(
    text: str,
    source: str = "config.yaml",
    *,
    environ: Mapping[str, str] | None = None,
    ports: Mapping[str, int] | None = None,
) -> Loaded:
    """Load config text, keeping the warnings."""
    try:
        document = parse(text)
    except YamlSyntaxError as error:
        raise ConfigError([ConfigIssue(source, error.line, "", error.message)]) from None
    builder = _Builder(document, source, os.environ if environ is None else environ, ports)
    try:
        config = builder.build()
    except RecursionError:
        # Deep values that parsed with room to spare can still exhaust a deeper caller's stack.
        issue = ConfigIssue(source, None, "", "YAML document is nested too deeply")
        raise ConfigError([issue]) from None
    builder.report.raise_if_errors()
    if config is None:  # build() only gives up after reporting why
        raise ConfigError([ConfigIssue(source, None, "", "config not usable")])
    return Loaded(config, tuple(builder.report.warnings))


def _without(mapping: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k not in keys}


@dataclass
class _Model:
    """A model between macro expansion and its typed form."""

    id: str
    path: Path
    body: dict[str, Any]
    cmd_text: str | None = None
    gpus: tuple[str, ...] | None = None
    port: int | None = None
    scope: list[macros.Macro] = field(default_factory=list)


class _Builder:
    def __init__(
        self,
        document: Document,
        source: str,
        environ: Mapping[str, str],
        ports: Mapping[str, int] | None = None,
    ) -> None:
        self.document = document
        self.ports = dict(ports or {})
        self.source = source
        self.environ = environ
        self.report = Report(source, document)
        self.read = Reader(self.report)
        self.ignored: list[Path] = []
        # Every model's aliases, also of models with errors, so alias clashes are reported too.
        self.aliases: dict[str, list[str]] = {}

    # -- top level ---------------------------------------------------------------------------

    def build(self) -> c.Config | None:
        for line, path, message in self.document.problems:
            self.report.error(path, message, line=line)
        data = self.document.data
        if data is None:
            data = {}
        if not isinstance(data, dict):
            self.report.error(
                (), f"the top level must be a mapping (keys such as models:), got {describe(data)}"
            )
            return None
        checker = KeyCheck(self.report)
        checker.check(data, TOP_LEVEL, ())
        self.ignored = checker.ignored_paths
        data = self._drop_ignored(data, ())

        raw_models = data.get("models")
        if raw_models is not None and not isinstance(raw_models, dict):
            self.report.error(
                ("models",), f"expected a mapping of model ids, got {describe(raw_models)}"
            )
            raw_models = None
        models = self._strip_cmd_comments(raw_models or {})
        data = macros.substitute_env(
            {**data, "models": models}, (), self.environ, self.document, self.report
        )
        global_macros = macros.declare(data.get("macros"), ("macros",), self.report)
        top = {
            key: macros.expand(value, global_macros)
            for key, value in data.items()
            if key not in ("models", "macros")
        }
        self._check_leftovers(top, (), global_macros, model=False)

        health, health_forced = self._health_check_timeout(top)
        start_port = self.read.integer(top, (), "startPort", minimum=1)
        if start_port is not None and start_port > MAX_PORT:
            self.report.error(("startPort",), f"must be at most {MAX_PORT}, got {start_port}")
            start_port = None
        global_ttl = self.read.integer(top, (), "globalTTL", minimum=0)
        unload_timeout = self.read.number(top, (), "unloadTimeout", minimum=0)

        staged = [
            self._expand_model(model_id, body, global_macros)
            for model_id, body in data["models"].items()
            if isinstance(body, dict)
        ]
        self._allocate_ports(staged, start_port or c.DEFAULT_START_PORT)
        defaults = _ModelDefaults(
            ttl=global_ttl or 0,
            unload_timeout=unload_timeout or float(c.DEFAULT_UNLOAD_TIMEOUT),
            health_check_timeout=float(health),
        )
        built = {}
        for model in staged:
            self._check_leftovers(
                _without(model.body, "macros"), model.path, model.scope, model=True
            )
            result = self._model(model, defaults)
            if result is not None:
                built[model.id] = result

        groups = self._groups(top, data["models"])
        peers = self._peers(top, data["models"])
        self._check_aliases(data["models"], peers)
        return c.Config(
            models=built,
            health_check_timeout=health,
            log_level=self._log_level(top),
            start_port=start_port or c.DEFAULT_START_PORT,
            global_ttl=global_ttl or 0,
            api_keys=self._api_keys(top),
            include_aliases_in_list=bool(self.read.boolean(top, (), "includeAliasesInList")),
            groups=groups,
            peers=peers,
            ignore_paths=self._ignore_paths(top),
            preload=self._preload(top, built),
            source=self.source,
            forced=health_forced,
        )

    def _drop_ignored(self, value: Any, path: Path) -> Any:
        """Remove accepted-but-ignored llama-swap keys, so no later check looks inside them."""
        if not isinstance(value, dict):
            return value
        return {
            k: self._drop_ignored(v, (*path, k))
            for k, v in value.items()
            if (*path, k) not in self.ignored
        }

    def _strip_cmd_comments(self, models: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for model_id, body in models.items():
            path = ("models", model_id)
            if body is None:
                self.report.error(path, "expected a mapping with at least cmd, got null")
                continue
            if not isinstance(body, dict):
                self.report.error(
                    path, f"expected a mapping with at least cmd, got {describe(body)}"
                )
                continue
            body = dict(body)
            for key in ("cmd", "cmdStop"):
                value = body.get(key)
                if not isinstance(value, str):
                    continue
                unfolded = self.document.unfolded.get((*path, key))
                if unfolded is None:
                    body[key] = strip_comment_lines(value)
                    continue
                # A folded scalar's lines were joined by YAML, so a `#` line there is an
                # argument; its unfolded text only serves to keep `\` continuations working.
                body[key] = unfolded
                hashed = next((ln for ln in unfolded.split("\n") if ln.lstrip()[:1] == "#"), None)
                if hashed is not None:
                    self.report.warn(
                        (*path, key),
                        "a '#' line in a folded (>) block is passed as arguments, not dropped "
                        "as a comment; write the block with | for comment lines",
                        line=self.document.find_line((*path, key), hashed.strip()),
                    )
            result[model_id] = body
        return result

    def _health_check_timeout(self, top: dict[str, Any]) -> tuple[int, tuple[c.Forced, ...]]:
        value = self.read.integer(top, (), "healthCheckTimeout")
        if value is None:
            return c.DEFAULT_HEALTH_CHECK_TIMEOUT, ()
        if value < c.MIN_HEALTH_CHECK_TIMEOUT:
            forced = c.Forced("healthCheckTimeout", c.MIN_HEALTH_CHECK_TIMEOUT, HEALTH_CHECK_REASON)
            self.report.warn(
                ("healthCheckTimeout",),
                f"{value} raised to {c.MIN_HEALTH_CHECK_TIMEOUT}: {HEALTH_CHECK_REASON}",
            )
            return c.MIN_HEALTH_CHECK_TIMEOUT, (forced,)
        return value, ()

    def _log_level(self, top: dict[str, Any]) -> str:
        level = self.read.text(top, (), "logLevel")
        if level is None:
            return "info"
        if level not in LOG_LEVELS:
            guess = suggest(level, LOG_LEVELS)
            hint = f" (did you mean {guess!r}?)" if guess else ""
            self.report.warn(
                ("logLevel",),
                f"unknown log level {level!r}{hint}; using 'info' as llama-swap does "
                f"(one of {', '.join(LOG_LEVELS)})",
            )
            return "info"
        return level

    def _api_keys(self, top: dict[str, Any]) -> tuple[str, ...]:
        keys = self.read.text_list(top, (), "apiKeys") or []
        good = []
        for index, key in keys:
            # The key itself is never quoted: error output ends up in logs.
            if not key.strip():
                self.report.error(("apiKeys", index), "empty API key")
            elif any(ch.isspace() for ch in key):
                self.report.error(("apiKeys", index), "an API key cannot contain spaces")
            else:
                good.append(key)
        return tuple(good)

    def _ignore_paths(self, top: dict[str, Any]) -> tuple[str, ...]:
        upstream = self.read.mapping(top, (), "upstream") or {}
        patterns = self.read.text_list(upstream, ("upstream",), "ignorePaths")
        if not patterns:
            return c.DEFAULT_IGNORE_PATHS
        for index, pattern in patterns:
            try:
                re.compile(pattern)
            except (re.error, RecursionError, OverflowError) as error:
                self.report.error(
                    ("upstream", "ignorePaths", index),
                    f"invalid regular expression {pattern!r}: {error}",
                )
        return tuple(pattern for _, pattern in patterns)

    def _preload(self, top: dict[str, Any], models: dict[str, c.ModelConfig]) -> tuple[str, ...]:
        hooks = self.read.mapping(top, (), "hooks") or {}
        on_startup = self.read.mapping(hooks, ("hooks",), "on_startup") or {}
        path = ("hooks", "on_startup")
        names = self.read.text_list(on_startup, path, "preload") or []
        resolved: list[str] = []
        for index, name in names:
            name = name.strip()
            if not name:
                continue
            model = _resolve(models, name)
            if model is None:
                guess = suggest(name, models)
                hint = f" (did you mean {guess!r}?)" if guess else ""
                self.report.warn(
                    (*path, "preload", index),
                    f"{name!r} is not a local model id or alias{hint}; it is not preloaded",
                )
            elif model.id not in resolved:
                resolved.append(model.id)
        return tuple(resolved)

    # -- macros -----------------------------------------------------------------------------

    def _expand_model(
        self, model_id: str, body: dict[str, Any], global_macros: list[macros.Macro]
    ) -> _Model:
        path = ("models", model_id)
        own = macros.declare(body.get("macros"), (*path, "macros"), self.report)
        scope = macros.scope(model_id, global_macros, own)
        expanded = {
            key: value if key == "macros" else macros.expand(value, scope)
            for key, value in body.items()
        }
        model = _Model(model_id, path, expanded, scope=scope)
        model.gpus = self._gpus(expanded, path)
        if model.gpus is not None:
            model.body = self._expand_fields(model.body, [("GPUS", ",".join(model.gpus))])
        cmd = model.body.get("cmd")
        if isinstance(cmd, str):
            model.cmd_text = cmd
        return model

    @staticmethod
    def _expand_fields(body: dict[str, Any], scope: list[macros.Macro]) -> dict[str, Any]:
        return {
            key: value if key == "macros" else macros.expand(value, scope)
            for key, value in body.items()
        }

    def _allocate_ports(self, staged: list[_Model], start_port: int) -> None:
        """`${PORT}` for every model whose cmd uses it, from `startPort` up in sorted id order.

        A model in `self.ports` (a reload: the ports of the config it replaces and of the
        running processes) keeps its port, and no other model gets one of those, so adding or
        removing a model never renumbers another (whose definition would then change)."""
        taken = set(self.ports.values())
        port = start_port
        for model in sorted(staged, key=lambda m: m.id):
            if model.cmd_text is None or "${PORT}" not in model.cmd_text:
                continue
            assigned = self.ports.get(model.id)
            if assigned is None:
                while port in taken:
                    port += 1
                if port > MAX_PORT:
                    self.report.error(
                        (*model.path, "cmd"),
                        f"no ${{PORT}} left: allocation from startPort {start_port} passed "
                        f"{MAX_PORT}",
                    )
                    continue
                assigned = port
                port += 1
            model.port = assigned
            model.body = self._expand_fields(model.body, [("PORT", assigned)])
            cmd = model.body.get("cmd")
            model.cmd_text = cmd if isinstance(cmd, str) else None

    def _check_leftovers(
        self, value: Any, path: Path, known: list[macros.Macro], *, model: bool
    ) -> None:
        """Report every `${...}` that no macro filled; `known` gives the "did you mean"."""
        known_names = [name for name, _ in known]
        for where, name in macros.references(value, path):
            top_key = where[len(path)] if len(where) > len(path) else ""
            if _ENV_REF_NAME.match(name):
                continue  # already reported as an unset environment variable
            if name == "PID" and model and top_key == "cmdStop":
                continue
            if name == "PID":
                message = "${PID} is only available in cmdStop"
            elif name == "PORT" and model and top_key == "proxy":
                message = (
                    "proxy uses ${PORT} but cmd does not - "
                    "${PORT} is only available when used in cmd"
                )
            elif name == "PORT" and model:
                message = "${PORT} is only available when the model's cmd uses it"
            elif name == "GPUS" and model:
                message = "${GPUS} is only available when the model sets gpus"
            elif name in ("PORT", "GPUS", "MODEL_ID"):
                message = f"${{{name}}} is only available inside a model's settings"
            elif name in known_names:
                message = (
                    f"${{{name}}} is left over: macro {name!r} is defined after the macro "
                    "that uses it"
                )
            else:
                guess = suggest(name, known_names)
                hint = f"; did you mean '${{{guess}}}'?" if guess else ""
                message = f"unknown macro '${{{name}}}'{hint}"
            line = self.document.find_line(where, f"${{{name}}}")
            self.report.error(where, message, line=line)

    # -- models -----------------------------------------------------------------------------

    def _gpus(self, body: dict[str, Any], path: Path) -> tuple[str, ...] | None:
        value = body.get("gpus")
        where = (*path, "gpus")
        if value is None:
            return None
        if not isinstance(value, list):
            self.report.error(
                where,
                f"expected a list of GPU indices or UUIDs such as [0, 1], got {describe(value)}",
            )
            return None
        if not value:
            self.report.error(where, "lists no GPU; leave gpus out to use every GPU")
            return None
        gpus: list[str] = []
        for index, item in enumerate(value):
            if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
                gpu = str(item)
            elif isinstance(item, str) and item.strip() and "," not in item:
                gpu = item.strip()
            else:
                self.report.error(
                    (*where, index),
                    f"expected a GPU index (0, 1, ...) or UUID, got {describe(item)}",
                )
                continue
            if gpu in gpus:
                self.report.error((*where, index), f"GPU {gpu} is listed twice")
                continue
            gpus.append(gpu)
        return tuple(gpus)

    def _command(self, body: dict[str, Any], path: Path, key: str) -> tuple[str, ...] | None:
        text = self.read.text(body, path, key)
        if text is None:
            return None
        if key == "cmdStop" and not text.strip():
            return None  # llama-swap's default: "" means no cmdStop
        try:
            argv = split_command(text)
        except ValueError as error:
            self.report.error((*path, key), f"cannot split into words: {error}")
            return None
        if not argv:
            self.report.error((*path, key), "is empty (only blanks or comment lines)")
            return None
        return tuple(argv)

    def _model(self, model: _Model, defaults: _ModelDefaults) -> c.ModelConfig | None:
        body, path, read = model.body, model.path, self.read
        errors_before = len(self.report.errors)
        if body.get("cmd") is None:
            self.report.error(
                (*path, "cmd"), "cmd is required: the command that starts the model's server"
            )
        cmd = self._command(body, path, "cmd")
        cmd_stop = self._command(body, path, "cmdStop")
        proxy = read.text(body, path, "proxy")
        if proxy is None:
            proxy = c.DEFAULT_PROXY.replace("${PORT}", str(model.port)) if model.port else None
            if proxy is None and cmd is not None:
                self.report.error(
                    (*path, "proxy"),
                    "the default proxy http://localhost:${PORT} needs ${PORT} in cmd; "
                    "use ${PORT} in cmd or set proxy",
                )
        elif "${" not in proxy:
            self._check_url(proxy, (*path, "proxy"))
        check_endpoint = self._check_endpoint(body, path)
        ttl = read.integer(body, path, "ttl")
        if ttl is not None and ttl < -1:
            self.report.error(
                (*path, "ttl"),
                f"must be 0 (never unload), seconds to stay idle, or -1 (use globalTTL), got {ttl}",
            )
        unload_timeout = read.number(body, path, "unloadTimeout", minimum=0)
        concurrency = read.integer(body, path, "concurrencyLimit", minimum=0)
        compat = read.mapping(body, path, "compat") or {}
        ignore_websockets = bool(read.boolean(compat, (*path, "compat"), "ignoreWebsockets"))
        aliases = self._aliases(model.id, body, path)
        env = self._env(body, path)
        unlisted = bool(read.boolean(body, path, "unlisted"))
        # Empty means unset, as in llama-swap (omitted from /v1/models, no rename upstream).
        use_model_name = read.text(body, path, "useModelName") or None
        name = read.text(body, path, "name") or None
        description = read.text(body, path, "description") or None
        metadata = read.free_mapping(body, path, "metadata") or {}
        filters = self._filters(body, path)
        busy_check = read_busy_check(body, path, self.report)
        if len(self.report.errors) > errors_before or cmd is None or proxy is None:
            return None

        limit = concurrency or c.DEFAULT_CONCURRENCY_LIMIT
        forced: list[c.Forced] = []
        if model.id == COMFYUI_MODEL_ID:
            if not ignore_websockets:
                ignore_websockets = True
                forced.append(c.Forced("compat.ignoreWebsockets", True, COMFYUI_WEBSOCKETS_REASON))
            if limit < c.COMFYUI_MIN_CONCURRENCY:
                limit = c.COMFYUI_MIN_CONCURRENCY
                forced.append(
                    c.Forced(
                        "concurrencyLimit", c.COMFYUI_MIN_CONCURRENCY, COMFYUI_CONCURRENCY_REASON
                    )
                )
        return c.ModelConfig(
            id=model.id,
            cmd=cmd,
            cmd_stop=cmd_stop,
            proxy=proxy,
            check_endpoint=check_endpoint,
            ttl=defaults.ttl if ttl is None or ttl == -1 else ttl,
            unload_timeout=unload_timeout or defaults.unload_timeout,
            health_check_timeout=defaults.health_check_timeout,
            concurrency_limit=limit,
            ignore_websockets=ignore_websockets,
            aliases=tuple(aliases),
            env=env,
            unlisted=unlisted,
            use_model_name=use_model_name,
            name=name,
            description=description,
            metadata=metadata,
            filters=filters,
            gpus=model.gpus,
            port=model.port,
            forced=tuple(forced),
            busy_check=busy_check,
        )

    def _aliases(self, model_id: str, body: dict[str, Any], path: Path) -> list[str]:
        raw = body.get("aliases")
        where = (*path, "aliases")
        aliases: list[str] = []
        if raw is not None and not isinstance(raw, list):
            self.report.error(where, f"expected a list of alias names, got {describe(raw)}")
        for index, item in enumerate(raw if isinstance(raw, list) else []):
            if isinstance(item, dict):
                # Newer llama-swap also writes an alias as {id, name, unlisted}: keep the id.
                extra = sorted(set(item) - {"id"})
                if extra:
                    self.report.warn(
                        (*where, index), f"alias {', '.join(extra)} accepted but ignored by swapd"
                    )
                if item.get("id") is None:
                    self.report.error((*where, index), "an alias written as a mapping needs an id")
                    continue
                item = item["id"]
            text = self.read.scalar_text(item, (*where, index)) if item is not None else ""
            if text is None:
                continue
            if not text.strip():
                self.report.error((*where, index), "an alias cannot be empty")
                continue
            aliases.append(text)
        self.aliases[model_id] = aliases
        return aliases

    def _check_url(self, url: str, where: Path) -> None:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError as error:
            self.report.error(where, f"invalid URL {url!r}: {error}")
            return
        if parts.scheme not in ("http", "https") or not parts.hostname:
            self.report.error(
                where, f"expected an http:// or https:// URL with a host, got {url!r}"
            )

    def _check_endpoint(self, body: dict[str, Any], path: Path) -> str | None:
        value = self.read.text(body, path, "checkEndpoint")
        if value is None:
            return c.DEFAULT_CHECK_ENDPOINT
        value = value.strip()
        if value == "none":
            return None
        if not value.startswith("/"):
            self.report.error(
                (*path, "checkEndpoint"),
                f"expected a path starting with '/' or 'none', got {value!r}",
            )
        return value

    def _env(self, body: dict[str, Any], path: Path) -> dict[str, str]:
        value = body.get("env")
        where = (*path, "env")
        if value is None:
            return {}
        if isinstance(value, dict):
            self.report.error(
                where, "expected a list of NAME=value strings (write `- NAME=value`), got a mapping"
            )
            return {}
        entries = self.read.text_list(body, path, "env") or []
        env: dict[str, str] = {}
        for index, entry in entries:
            name, sep, val = entry.partition("=")
            if not sep or not _ENV_NAME.match(name):
                self.report.error(
                    (*where, index), f"expected NAME=value with a variable name, got {entry!r}"
                )
                continue
            env[name] = val  # later entries win, as in llama-swap
        return env

    def _filters(self, body: dict[str, Any], path: Path) -> c.Filters:
        filters = self.read.mapping(body, path, "filters")
        if filters is None:
            return c.Filters()
        where = (*path, "filters")
        strip = self.read.text(filters, where, "stripParams")
        if strip is None:
            strip = self.read.text(filters, where, "strip_params")
        params = sorted({p.strip() for p in (strip or "").split(",")} - {"", "model"})
        set_params = self.read.free_mapping(filters, where, "setParams") or {}
        if "model" in set_params:
            self.report.warn((*where, "setParams", "model"), "'model' cannot be set; ignored")
        return c.Filters(strip_params=tuple(params), set_params=_without(set_params, "model"))

    # -- groups, peers, aliases -------------------------------------------------------------

    def _alias_owner(self, name: str) -> str | None:
        for model_id, aliases in self.aliases.items():
            if name in aliases:
                return model_id
        return None

    def _groups(self, top: dict[str, Any], raw_models: dict[str, Any]) -> dict[str, c.GroupConfig]:
        raw = self.read.mapping(top, (), "groups") or {}
        groups: dict[str, c.GroupConfig] = {}
        owner: dict[str, str] = {}
        for group_id, body in raw.items():
            path = ("groups", group_id)
            if not isinstance(body, dict):
                self.report.error(path, f"expected a mapping with members, got {describe(body)}")
                continue
            members: list[str] = []
            for index, member in self.read.text_list(body, path, "members") or []:
                where = (*path, "members", index)
                if member not in raw_models:
                    owner_id = self._alias_owner(member)
                    if owner_id is not None:
                        hint = f"; it is an alias of {owner_id!r}, list the model id"
                    else:
                        guess = suggest(member, raw_models)
                        hint = f"; did you mean {guess!r}?" if guess else ""
                    self.report.error(where, f"{member!r} is not a model{hint}")
                elif member in members:
                    self.report.error(where, f"model {member!r} is listed twice in this group")
                elif member in owner:
                    self.report.error(
                        where, f"model {member!r} is already a member of group {owner[member]!r}"
                    )
                else:
                    owner[member] = group_id
                    members.append(member)
            swap = self.read.boolean(body, path, "swap")
            exclusive = self.read.boolean(body, path, "exclusive")
            groups[group_id] = c.GroupConfig(
                members=tuple(members),
                swap=True if swap is None else swap,
                exclusive=True if exclusive is None else exclusive,
                persistent=bool(self.read.boolean(body, path, "persistent")),
            )
        return groups

    def _peers(self, top: dict[str, Any], raw_models: dict[str, Any]) -> dict[str, c.PeerConfig]:
        raw = self.read.mapping(top, (), "peers") or {}
        peers: dict[str, c.PeerConfig] = {}
        for peer_id, body in raw.items():
            path = ("peers", peer_id)
            if not isinstance(body, dict):
                self.report.error(
                    path, f"expected a mapping with proxy and models, got {describe(body)}"
                )
                continue
            proxy = self.read.text(body, path, "proxy")
            if proxy is None:
                self.report.error((*path, "proxy"), "proxy is required: the peer's base URL")
            else:
                self._check_url(proxy, (*path, "proxy"))
            api_key = self.read.text(body, path, "apiKey")
            models: list[str] = []
            if body.get("models") in (None, []):
                self.report.error((*path, "models"), "a peer must list at least one model")
            for index, model_id in self.read.text_list(body, path, "models") or []:
                if model_id in raw_models:
                    line = self.document.line(("models", model_id), key=True)
                    self.report.error(
                        (*path, "models", index),
                        f"model {model_id!r} is defined both locally (line {line}) "
                        f"and on peer {peer_id!r}",
                    )
                elif model_id not in models:
                    models.append(model_id)
            filters = self._filters(body, path)
            if proxy is not None:
                peers[peer_id] = c.PeerConfig(
                    proxy=proxy, models=tuple(models), api_key=api_key, filters=filters
                )
        return peers

    def _check_aliases(self, raw_models: dict[str, Any], peers: dict[str, c.PeerConfig]) -> None:
        seen: dict[str, str] = {}
        qualified = {
            f"{peer_id}/{m}": peer_id for peer_id, peer in peers.items() for m in peer.models
        }
        for model_id in raw_models:
            path = ("models", model_id, "aliases")
            if model_id in qualified:
                self.report.error(
                    ("models", model_id),
                    f"model id {model_id!r} is also the full name of a model on peer "
                    f"{qualified[model_id]!r}",
                    key=True,
                )
            for index, alias in enumerate(self.aliases.get(model_id, [])):
                if alias in raw_models:
                    self.report.error(
                        (*path, index), f"alias {alias!r} is the id of model {alias!r}"
                    )
                elif alias in seen:
                    other = seen[alias]
                    where = "this model" if other == model_id else f"model {other!r}"
                    self.report.error(
                        (*path, index), f"duplicate alias {alias!r}: already an alias of {where}"
                    )
                elif alias in qualified:
                    self.report.error(
                        (*path, index),
                        f"alias {alias!r} is the full name of a model on peer {qualified[alias]!r}",
                    )
                else:
                    seen[alias] = model_id


@dataclass(frozen=True)
class _ModelDefaults:
    ttl: int
    unload_timeout: float
    health_check_timeout: float


def _resolve(models: Mapping[str, c.ModelConfig], name: str) -> c.ModelConfig | None:
    if name in models:
        return models[name]
    for model in models.values():
        if name in model.aliases:
            return model
    return None
