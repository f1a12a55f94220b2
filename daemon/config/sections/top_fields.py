"""The top level's quirks and the checks across sections: `healthCheckTimeout`'s minimum, the
log level, API keys, `ignorePaths`, `preload`, and what groups, peers and aliases may name."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ....ipc import log_time
from .. import model as c
from .. import shape
from ..floor.issues import Report
from ..floor.patterns import NESTED_QUANTIFIER_WARNING, has_nested_quantifier
from ..floor.schema import suggest
from ..floor.typed import Converter
from ..floor.yaml_nodes import Document
from ..floor.yaml_nodes import Path as KeyPath
from .common import check_url, filters_of, name_problem
from .timeouts import timeouts_of

LOG_LEVELS = ("debug", "info", "warn", "error")
HEALTH_CHECK_REASON = (
    f"healthCheckTimeout is never below {shape.MIN_HEALTH_CHECK_TIMEOUT} s (llama-swap's minimum)"
)


def health_check_timeout(value: int | None, report: Report) -> tuple[int, tuple[c.Forced, ...]]:
    if value is None:
        return shape.DEFAULT_HEALTH_CHECK_TIMEOUT, ()
    if value < shape.MIN_HEALTH_CHECK_TIMEOUT:
        forced = c.Forced("healthCheckTimeout", shape.MIN_HEALTH_CHECK_TIMEOUT, HEALTH_CHECK_REASON)
        report.warn(
            ("healthCheckTimeout",),
            f"{value} raised to {shape.MIN_HEALTH_CHECK_TIMEOUT}: {HEALTH_CHECK_REASON}",
        )
        return shape.MIN_HEALTH_CHECK_TIMEOUT, (forced,)
    return value, ()


def log_level(level: str | None, report: Report) -> str:
    if level is None:
        return "info"
    if level not in LOG_LEVELS:
        guess = suggest(level, LOG_LEVELS)
        hint = f" (did you mean {guess!r}?)" if guess else ""
        report.warn(
            ("logLevel",),
            f"unknown log level {level!r}{hint}; using 'info' as llama-swap does "
            f"(one of {', '.join(LOG_LEVELS)})",
        )
        return "info"
    return level


def log_time_format(value: str | None, report: Report) -> str | None:
    name = log_time.normalise(value)
    if name and name not in log_time.NAMES:
        report.warn(
            ("logTimeFormat",),
            f"unknown time format {value!r}: swapd's log lines get no timestamp, as llama-swap's "
            f"(one of {', '.join(log_time.NAMES)})",
        )
    return name


def api_keys(top: shape.Top, typed: Converter, report: Report) -> tuple[str, ...]:
    good = []
    for index, key in typed.indexed(("apiKeys",), top.api_keys):
        # The key itself is never quoted: error output ends up in logs.
        if not key.strip():
            report.error(("apiKeys", index), "empty API key")
        elif any(ch.isspace() for ch in key):
            report.error(("apiKeys", index), "an API key cannot contain spaces")
        else:
            good.append(key)
    return tuple(good)


def ignore_paths(top: shape.Top, typed: Converter, report: Report) -> tuple[str, ...]:
    where = ("upstream", "ignorePaths")
    patterns = typed.indexed(where, top.upstream.ignore_paths if top.upstream else None)
    if not patterns:
        return c.DEFAULT_IGNORE_PATHS
    for index, pattern in patterns:
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as error:
            report.error((*where, index), f"invalid regular expression {pattern!r}: {error}")
            continue
        if has_nested_quantifier(pattern):
            report.warn((*where, index), NESTED_QUANTIFIER_WARNING.format(pattern=pattern))
    return tuple(pattern for _, pattern in patterns)


def preload(
    top: shape.Top, models: Mapping[str, c.ModelConfig], typed: Converter, report: Report
) -> tuple[str, ...]:
    path = ("hooks", "on_startup", "preload")
    on_startup = top.hooks.on_startup if top.hooks else None
    resolved: list[str] = []
    for index, name in typed.indexed(path, on_startup.preload if on_startup else None):
        name = name.strip()
        if not name:
            continue
        model = _resolve(models, name)
        if model is None:
            guess = suggest(name, models)
            hint = f" (did you mean {guess!r}?)" if guess else ""
            report.warn(
                (*path, index),
                f"{name!r} is not a local model id or alias{hint}; it is not preloaded",
            )
        elif model.id not in resolved:
            resolved.append(model.id)
    return tuple(resolved)


def _resolve(models: Mapping[str, c.ModelConfig], name: str) -> c.ModelConfig | None:
    if name in models:
        return models[name]
    for model in models.values():
        if name in model.aliases:
            return model
    return None


class CrossCheck:
    """Groups, peers and aliases against the models the file defines (also those with errors)."""

    def __init__(
        self,
        raw_models: Mapping[str, Any],
        aliases: Mapping[str, list[str]],
        typed: Converter,
        document: Document,
    ) -> None:
        self.raw_models = raw_models
        self.aliases = aliases
        self.typed = typed
        self.report = typed.report
        self.document = document

    def _alias_owner(self, name: str) -> str | None:
        for model_id, aliases in self.aliases.items():
            if name in aliases:
                return model_id
        return None

    def groups(
        self, specs: Mapping[str, shape.Group] | None, base: KeyPath = ("groups",)
    ) -> dict[str, c.GroupConfig]:
        groups: dict[str, c.GroupConfig] = {}
        owner: dict[str, str] = {}
        for group_id, spec in (specs or {}).items():
            path = (*base, group_id)
            members: list[str] = []
            for index, member in self.typed.indexed((*path, "members"), spec.members):
                where = (*path, "members", index)
                if member not in self.raw_models:
                    owner_id = self._alias_owner(member)
                    if owner_id is not None:
                        hint = f"; it is an alias of {owner_id!r}, list the model id"
                    else:
                        guess = suggest(member, self.raw_models)
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
            groups[group_id] = c.GroupConfig(
                members=tuple(members),
                swap=True if spec.swap is None else spec.swap,
                exclusive=True if spec.exclusive is None else spec.exclusive,
                persistent=bool(spec.persistent),
            )
        return groups

    def peers(self, top: shape.Top, raw_peers: Mapping[str, Any]) -> dict[str, c.PeerConfig]:
        peers: dict[str, c.PeerConfig] = {}
        for peer_id, spec in (top.peers or {}).items():
            path = ("peers", peer_id)
            if spec.proxy is None:
                self.report.error((*path, "proxy"), "proxy is required: the peer's base URL")
            else:
                check_url(spec.proxy, (*path, "proxy"), self.report)
            models: list[str] = []
            if raw_peers[peer_id].get("models") in (None, []):
                self.report.error((*path, "models"), "a peer must list at least one model")
            for index, model_id in self.typed.indexed((*path, "models"), spec.models):
                if model_id in self.raw_models:
                    line = self.document.line(("models", model_id), key=True)
                    self.report.error(
                        (*path, "models", index),
                        f"model {model_id!r} is defined both locally (line {line}) "
                        f"and on peer {peer_id!r}",
                    )
                elif model_id not in models:
                    models.append(model_id)
            filters = filters_of(spec.filters, (*path, "filters"), self.report)
            if spec.proxy is not None:
                peers[peer_id] = c.PeerConfig(
                    id=peer_id,
                    proxy=spec.proxy,
                    models=tuple(models),
                    api_key=spec.api_key,
                    filters=filters,
                    timeouts=timeouts_of(spec.timeouts, peer=True),
                )
        return peers

    def by_id_names(
        self, by_id: Mapping[str, list[str]], peers: Mapping[str, c.PeerConfig] | None = None
    ) -> None:
        """setParamsByID names become aliases (llama-swap): they may name no other model, nor a
        peer's model by its full `peer/model` name (which they would shadow)."""
        owners: dict[str, str] = {}
        qualified = {
            f"{peer_id}/{m}": peer_id
            for peer_id, peer in (peers or {}).items()
            for m in peer.models
        }
        for model_id, names in by_id.items():
            for name in names:
                where = ("models", model_id, "filters", "setParamsByID", name)
                alias_of = self._alias_owner(name)
                problem = name_problem(name, "a setParamsByID key")
                if problem is not None:
                    self.report.error(where, problem, key=True)
                elif name in self.raw_models:
                    self.report.error(
                        where, f"setParamsByID key {name!r} is the id of model {name!r}", key=True
                    )
                elif alias_of is not None and alias_of != model_id:
                    self.report.error(
                        where,
                        f"duplicate alias {name!r}: already an alias of model {alias_of!r}",
                        key=True,
                    )
                elif name in owners:
                    self.report.error(
                        where,
                        f"duplicate alias {name!r}: already a setParamsByID key of model "
                        f"{owners[name]!r}",
                        key=True,
                    )
                elif name in qualified:
                    self.report.error(
                        where,
                        f"setParamsByID key {name!r} is the full name of a model on peer "
                        f"{qualified[name]!r}",
                        key=True,
                    )
                else:
                    owners[name] = model_id

    def aliases_and_ids(self, peers: Mapping[str, c.PeerConfig]) -> None:
        seen: dict[str, str] = {}
        qualified = {
            f"{peer_id}/{m}": peer_id for peer_id, peer in peers.items() for m in peer.models
        }
        for model_id in self.raw_models:
            path = ("models", model_id, "aliases")
            if model_id in qualified:
                self.report.error(
                    ("models", model_id),
                    f"model id {model_id!r} is also the full name of a model on peer "
                    f"{qualified[model_id]!r}",
                    key=True,
                )
            for index, alias in enumerate(self.aliases.get(model_id, [])):
                if alias in self.raw_models:
                    # llama-swap loads it: a request for the name gets the model of that id.
                    self.report.warn(
                        (*path, index),
                        f"alias {alias!r} is the id of model {alias!r}, which a request for it "
                        "gets (as in llama-swap): this alias is never used",
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


def peer_namespace(top: shape.Top, peers: Mapping[str, c.PeerConfig], report: Report) -> None:
    """A peer model's full name (`peer/model`) is reserved, as in llama-swap: two peers may not
    both make it, and no selector or profile pin may take it (models, aliases and setParamsByID
    keys are checked by `CrossCheck`)."""
    made: dict[str, str] = {}
    for peer_id, peer in peers.items():
        for model in peer.models:
            name = f"{peer_id}/{model}"
            if name in made and made[name] != peer_id:
                report.error(
                    ("peers", peer_id, "models"),
                    f"peer model name {name!r} is ambiguous between peers {made[name]!r} and "
                    f"{peer_id!r}",
                )
            made.setdefault(name, peer_id)
    for selector in top.selectors or {}:
        if selector in made:
            report.error(
                ("selectors", selector),
                f"selector id {selector!r} is the full name of a model on peer {made[selector]!r}",
                key=True,
            )
    for profile_id, profile in (top.profiles or {}).items():
        for pin in profile.pins or {}:
            if pin in made:
                report.error(
                    ("profiles", profile_id, "pins", pin),
                    f"pin {pin!r} is the full name of a model on peer {made[pin]!r}",
                    key=True,
                )


def store_path(top: shape.Top, source: str, report: Report) -> str:
    """`store.path` as llama-swap checks it (non-empty, not a directory, the file or its folder
    writable), made absolute against the config file's folder: circusd's working directory is
    not the operator's."""
    if top.store is None:
        return ""
    raw = (top.store.path or "").strip()
    if not raw:
        report.error(("store", "path"), "store.path must not be empty")
        return ""
    path = Path(raw).expanduser()
    if not path.is_absolute():
        base = Path(source).parent if source and Path(source).exists() else Path.cwd()
        path = base / path
    if path.is_dir():
        report.error(("store", "path"), f"store.path {raw!r} is a directory; expected a file")
    elif path.exists() and not os.access(path, os.W_OK):
        report.error(("store", "path"), f"store.path {raw!r} is not writable")
    elif not path.exists() and not os.access(path.parent, os.W_OK):
        report.error(
            ("store", "path"),
            f"store.path {raw!r}: the folder {str(path.parent)!r} is missing or not writable",
        )
    return str(path)
