"""Load a llama-swap YAML config into swapd's immutable `Config`, or fail with every problem.

Pipeline (llama-swap's order, reference §1.1 and §1.5): parse with line marks (`yaml_nodes`); the
known-key check (`schema`, derived from `shape`); comment lines out of `cmd`/`cmdStop`;
`${env.NAME}`; global macros over top-level values; per model the macro scope, `${GPUS}` and
`${PORT}` (`stages`); the leftover-macro check; typing with msgspec (`typed`, into `shape`'s
structs); llama-swap's quirks per model (`model_fields`) and at the top (`top_fields`), with the
cross checks of aliases, groups and peers. Nothing here raises anything but `ConfigError`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import model as c
from . import shape, stages
from .floor import keys, macros
from .floor.issues import ConfigError, ConfigIssue, Report, describe
from .floor.merge import Merged
from .floor.schema import KeyCheck, keys_of
from .floor.typed import Converter
from .floor.yaml_nodes import NESTED_TOO_DEEPLY, Document, Path, YamlSyntaxError, parse
from .sections import (
    gpu_fields,
    kv_cache_fields,
    model_fields,
    observe_fields,
    profiles,
    router_members,
    routing,
    security_fields,
    selectors,
    sleep_fields,
    top_fields,
)
from .sections.common import name_problem
from .sources import ConfigSources

__all__ = [
    "ConfigError",
    "ConfigIssue",
    "ConfigSources",
    "Loaded",
    "load",
    "load_config",
    "load_config_text",
]

log = logging.getLogger("swapd.config")

# Far above any real config (PyYAML reads about 1 MB a second here), and a bound on what is read.
MAX_FILE_BYTES = 16 * 2**20


@dataclass(frozen=True)
class Loaded:
    config: c.Config
    # llama-swap keys accepted but ignored, and other things worth a look; never fatal.
    warnings: tuple[ConfigIssue, ...]


def load_config(
    path: str | os.PathLike[str] | ConfigSources,
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
    path: str | os.PathLike[str] | ConfigSources,
    *,
    environ: Mapping[str, str] | None = None,
    ports: Mapping[str, int] | None = None,
    strict: bool = False,
) -> Loaded:
    """Load a config file (or `--config`/`--config-dir` sources), keeping the warnings. `ports`
    (model id -> port) are `${PORT}`s that carry over from the config this one replaces (see
    `stages.allocate_ports`). `strict`: an unknown key is an error, not a warning."""
    if isinstance(path, ConfigSources):
        if path.directory is None and path.file is not None:
            path = path.file
        else:
            return _load_sources(path, environ, ports, strict)
    source = os.fspath(path)
    return load_text(_read(source), source, environ=environ, ports=ports, strict=strict)


def _read(source: str) -> str:
    """A config file's text; raises ConfigError naming the file when it cannot be read."""
    try:
        with open(source, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)  # bounded: `-c /dev/zero` is an error, not a hang
    except OSError as error:
        reason = error.strerror or str(error)
        raise ConfigError(
            [ConfigIssue(source, None, "", f"cannot read config file: {reason}")]
        ) from None
    if len(data) > MAX_FILE_BYTES:
        message = f"cannot read config file: larger than {MAX_FILE_BYTES // 2**20} MiB"
        raise ConfigError([ConfigIssue(source, None, "", message)])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        # The place goes in the message: the file's lines are not known until it is text.
        line = data.count(b"\n", 0, error.start) + 1
        message = (
            f"cannot read config file: not UTF-8 text ({error.reason} at byte {error.start}, "
            f"line {line})"
        )
        raise ConfigError([ConfigIssue(source, None, "", message)]) from None
    return text


def _load_sources(
    sources: ConfigSources,
    environ: Mapping[str, str] | None,
    ports: Mapping[str, int] | None,
    strict: bool = False,
) -> Loaded:
    label = str(sources)
    merged: Merged | None = None
    issues: list[ConfigIssue] = []
    for path in sources.paths():
        name = os.fspath(path)
        try:
            document = parse(_read(name))
        except YamlSyntaxError as error:
            issues.append(ConfigIssue(name, error.line, "", error.message))
            continue
        except ConfigError as error:
            issues += error.issues
            continue
        if document.data is None:
            continue  # empty or comments only
        if not isinstance(document.data, dict):
            got = describe(document.data)
            message = f"the top level must be a mapping (keys such as models:), got {got}"
            issues.append(ConfigIssue(name, document.line(()), "", message))
        elif merged is None:
            merged = Merged(document, name)
        else:
            merged.add(document, name)
    if merged is not None:
        issues += [ConfigIssue(file, line, "", message) for file, line, message in merged.problems]
    if issues:
        raise ConfigError(issues)
    document = merged.document if merged is not None else parse("")
    return _load_document(document, label, environ, ports, strict)


def load_text(
    text: str,
    source: str = "config.yaml",
    *,
    environ: Mapping[str, str] | None = None,
    ports: Mapping[str, int] | None = None,
    strict: bool = False,
) -> Loaded:
    """Load config text, keeping the warnings."""
    try:
        document = parse(text)
    except YamlSyntaxError as error:
        raise ConfigError([ConfigIssue(source, error.line, "", error.message)]) from None
    return _load_document(document, source, environ, ports, strict)


def _load_document(
    document: Document,
    source: str,
    environ: Mapping[str, str] | None,
    ports: Mapping[str, int] | None,
    strict: bool = False,
) -> Loaded:
    builder = _Build(document, source, os.environ if environ is None else environ, ports)
    builder.strict = strict
    try:
        config = builder.build()
    except macros.ExpansionTooLarge as error:
        # Nothing after this value can be trusted to expand in bounded memory: stop here.
        builder.report.error(error.path, str(error))
        builder.report.raise_if_errors()
    except RecursionError:
        # Deep values that parsed with room to spare can still exhaust a deeper caller's stack.
        issue = ConfigIssue(source, None, "", NESTED_TOO_DEEPLY)
        raise ConfigError([issue]) from None
    builder.report.raise_if_errors()
    if config is None:  # build() only gives up after reporting why
        raise ConfigError([ConfigIssue(source, None, "", "config not usable")])
    return Loaded(config, tuple(builder.report.warnings))


def _without(mapping: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k not in keys}


class _Build:
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
        self.typed = Converter(self.report)
        self.ignored: list[Path] = []
        self.strict = False

    def build(self) -> c.Config | None:
        report, document = self.report, self.document
        for line, path, message in document.problems:
            report.error(path, message, line=line)
        data = {} if document.data is None else document.data
        if not isinstance(data, dict):
            report.error(
                (), f"the top level must be a mapping (keys such as models:), got {describe(data)}"
            )
            return None
        checker = KeyCheck(report, strict=self.strict)
        checker.check(data, keys_of(shape.Top), ())
        self.ignored = checker.ignored_paths
        data = self._drop_ignored(data, ())

        raw_models = data.get("models")
        if raw_models is not None and not isinstance(raw_models, dict):
            report.error(
                ("models",), f"expected a mapping of model ids, got {describe(raw_models)}"
            )
            raw_models = None
        raw_models = self._usable_ids(raw_models or {})
        models = stages.strip_cmd_comments(raw_models, document, report)
        data = macros.substitute_env({**data, "models": models}, (), self.environ, document, report)
        global_macros = macros.declare(data.get("macros"), ("macros",), report)
        top_raw = {
            key: macros.expand(value, global_macros, (key,))
            for key, value in data.items()
            if key not in ("models", "macros")
        }
        stages.check_leftovers(top_raw, (), global_macros, document, report, model=False)
        top = self.typed.section(top_raw, shape.Top, ())

        health, health_forced = top_fields.health_check_timeout(top.health_check_timeout, report)
        plain = keys.resolve(top, (), report, {})
        start_port = plain.fields["start_port"]
        grouped = router_members.grouped(data)
        decided = grouped | router_members.matrix_named(data)
        kv_root = kv_cache_fields.root(top.kv_cache_dir, self.source, self.environ)
        staged = [
            stages.expand_model(
                model_id,
                body,
                global_macros,
                report,
                auto_default=gpu_fields.auto_wanted(top.gpus, False) and model_id not in decided,
                kv_dir=kv_cache_fields.model_dir(kv_root, model_id),
            )
            for model_id, body in data["models"].items()
        ]
        stages.allocate_ports(staged, start_port, self.ports, report)
        defaults = model_fields.ModelDefaults(
            inherited=plain.by_name,
            health_check_timeout=float(health),
            kv_root=kv_root,
            sleep_timeouts=sleep_fields.Timeouts(
                sleep_fields.request_timeout(
                    top.sleep_request_timeout, ("sleepRequestTimeout",), report
                ),
                sleep_fields.request_timeout(
                    top.wake_request_timeout, ("wakeRequestTimeout",), report
                ),
            ),
        )
        built: dict[str, c.ModelConfig] = {}
        aliases: dict[str, list[str]] = {}
        by_id: dict[str, list[str]] = {}
        for model in staged:
            stages.check_leftovers(
                _without(model.body, "macros"),
                model.path,
                model.scope,
                document,
                report,
                model=True,
                gpus_auto=model.gpus_auto,
            )
            errors_before = len(report.errors)
            body = sleep_fields.one_form(model.body, model.path, report)
            spec = self.typed.section(body, shape.Model, model.path)
            aliases[model.id] = model_fields.aliases_of(model.id, spec.aliases, report)
            by_id[model.id] = model_fields.by_id_names(model.id, spec)
            extra = [n for n in by_id[model.id] if n not in aliases[model.id]]
            result = model_fields.build(
                model.id,
                spec,
                body,
                port=model.port,
                gpus=model.gpus,
                gpus_auto=model.gpus_auto,
                defaults=defaults,
                aliases=[*aliases[model.id], *extra],
                report=report,
                errors_before=errors_before,
            )
            if result is not None:
                built[model.id] = result

        built = gpu_fields.check_placement(
            built, data["models"], top.gpus, grouped, report, gpu_fields.gpus_of
        )
        cross = top_fields.CrossCheck(data["models"], aliases, self.typed, document)
        names = {model_id: model_id for model_id in data["models"]}
        names.update({a: model_id for model_id, alist in aliases.items() for a in alist})
        names.update({n: model_id for model_id, nlist in by_id.items() for n in nlist})
        routes = routing.normalise(top, cross, data["models"], names, report)
        router_members.check_auto_in_matrix(built, routes.matrix, report)
        peers = cross.peers(top, top_raw.get("peers") or {})
        cross.aliases_and_ids(peers)
        cross.by_id_names(by_id, peers)
        top_fields.peer_namespace(top, peers, report)
        chosen = selectors.read(top.selectors, names, peers, routes.groups, routes.matrix, report)
        perf_disabled, perf_every = observe_fields.performance(top, report)
        learn, learn_prefetch = observe_fields.learning(top)
        return c.Config(
            **plain.fields,
            models=built,
            health_check_timeout=health,
            log_level=top_fields.log_level(top.log_level, report),
            log_time_format=top_fields.log_time_format(top.log_time_format, report),
            api_keys=top_fields.api_keys(top, self.typed, report),
            vram_margin=gpu_fields.margin_of(top.vram_margin, ("vramMargin",), report),
            router=routes.router,
            groups=routes.groups,
            matrix=routes.matrix,
            priority=routes.priority,
            store_path=top_fields.store_path(top, self.source, report),
            kv_cache_dir=kv_root,
            peers=peers,
            ignore_paths=top_fields.ignore_paths(top, self.typed, report),
            preload=top_fields.preload(top, built, self.typed, report),
            profiles=profiles.read(top.profiles, [*names, *chosen], peers, report),
            selectors=chosen,
            source=self.source,
            forced=health_forced,
            session_headers=observe_fields.session_headers(top, self.typed),
            performance_disabled=perf_disabled,
            performance_every=perf_every,
            learn=learn,
            learn_prefetch=learn_prefetch,
            cors=security_fields.cors(top, self.typed, report),
        )

    def _usable_ids(self, models: dict[str, Any]) -> dict[str, Any]:
        """The models whose id a request can name; the others are reported at their key."""
        usable = {}
        for model_id, body in models.items():
            problem = name_problem(model_id, "a model id")
            if problem is None:
                usable[model_id] = body
            else:
                line = self.document.line(("models", model_id), key=True)
                self.report.error(("models",), problem, line=line)
        return usable

    def _drop_ignored(self, value: Any, path: Path) -> Any:
        """Remove accepted-but-ignored llama-swap keys, so no later check looks inside them."""
        if not isinstance(value, dict):
            return value
        return {
            k: self._drop_ignored(v, (*path, k))
            for k, v in value.items()
            if (*path, k) not in self.ignored
        }
