"""The config keys swapd knows: what it acts on, and what it accepts from llama-swap and ignores.

Anything else is an error, with a "did you mean" when a known key is close. llama-swap itself
ignores unknown keys silently, which turns a typo such as `checkEndPoint` into a default nobody
asked for.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .issues import Report
from .yaml_nodes import Path

# Top-level keys starting with this are the user's own (docker compose's convention): ignored.
EXTENSION_PREFIX = "x-"


@dataclass(frozen=True)
class Key:
    # The keys of a nested mapping, when swapd checks them.
    children: Mapping[str, Key] | None = None
    # A llama-swap key swapd accepts (so a real llama-swap config loads) but does not act on.
    ignored: bool = False
    # A mapping of user-chosen names (models, groups, peers) whose values have this shape.
    entries: Mapping[str, Key] | None = None
    # Why it is ignored, shown in the warning.
    note: str = ""


def _keys(*names: str, **nested: Key) -> dict[str, Key]:
    table = {name: Key() for name in names}
    table.update(nested)
    return table


def _ignored(note: str = "") -> Key:
    return Key(ignored=True, note=note)


FILTERS = _keys(
    "stripParams",
    "setParams",
    strip_params=Key(),  # llama-swap's legacy spelling, still read
    setParamsByID=_ignored("swapd applies stripParams and setParams only"),
)

MODEL = _keys(
    "cmd",
    "cmdStop",
    "proxy",
    "checkEndpoint",
    "ttl",
    "unloadTimeout",
    "aliases",
    "env",
    "unlisted",
    "useModelName",
    "concurrencyLimit",
    "name",
    "description",
    "metadata",
    "macros",
    "gpus",
    "busyCheck",  # its own keys are checked where it is read (busy_check.py)
    compat=Key(children=_keys("ignoreWebsockets")),
    filters=Key(children=FILTERS),
    sendLoadingState=_ignored("swapd sends no loading-state stream"),
    timeouts=_ignored("swapd's proxy uses its own upstream timeouts"),
    capabilities=_ignored("swapd does not report capabilities in /v1/models"),
)

GROUP = _keys("swap", "exclusive", "persistent", "members")

PEER = _keys(
    "proxy",
    "apiKey",
    "models",
    filters=Key(children=_keys("stripParams", "setParams", strip_params=Key())),
    timeouts=_ignored("swapd's proxy uses its own upstream timeouts"),
)

TOP_LEVEL = _keys(
    "healthCheckTimeout",
    "logLevel",
    "startPort",
    "globalTTL",
    "unloadTimeout",
    "macros",
    "apiKeys",
    "includeAliasesInList",
    models=Key(entries=MODEL),
    groups=Key(entries=GROUP),
    peers=Key(entries=PEER),
    upstream=Key(children=_keys("ignorePaths")),
    hooks=Key(children=_keys(on_startup=Key(children=_keys("preload")))),
    logTimeFormat=_ignored("swapd's log lines have their own format"),
    logToStdout=_ignored("model output goes to per-model log files"),
    logRequests=_ignored("deprecated in llama-swap too"),
    metricsMaxInMemory=_ignored("swapd keeps no in-memory activity database"),
    captureBuffer=_ignored("swapd does not capture requests"),
    sendLoadingState=_ignored("swapd sends no loading-state stream"),
    store=_ignored("swapd keeps no activity database"),
    ui=_ignored("swapd has no web UI"),
    performance=_ignored("swapd does not sample performance"),
    profiles=_ignored("profiles are not implemented; requests are routed by model id and alias"),
    selectors=_ignored("selectors are not implemented"),
    routing=_ignored("swapd routes with groups and gpus; set groups at the top level"),
    matrix=_ignored("the matrix router is not implemented; use groups or gpus"),
)


@dataclass
class KeyCheck:
    """Checks parsed data against the table: unknown keys are errors, ignored ones warnings."""

    report: Report
    ignored_paths: list[Path] = field(default_factory=list)

    def check(self, mapping: Mapping[str, object], table: Mapping[str, Key], path: Path) -> None:
        for name, value in mapping.items():
            child = (*path, name)
            if not path and name.startswith(EXTENSION_PREFIX):
                self.ignored_paths.append(child)  # a home for YAML anchors, as in compose files
                continue
            key = table.get(name)
            if key is None:
                self.report.error(child, unknown_key_message(name, table), key=True)
                continue
            if key.ignored:
                self.ignored_paths.append(child)
                note = f" ({key.note})" if key.note else ""
                self.report.warn(
                    child, f"llama-swap key accepted but ignored by swapd{note}", key=True
                )
                continue
            if not isinstance(value, dict):
                continue
            if key.children is not None:
                self.check(value, key.children, child)
            elif key.entries is not None:
                for entry, body in value.items():
                    if isinstance(body, dict):
                        self.check(body, key.entries, (*child, entry))


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to a mistyped name, if any is close."""
    options = list(candidates)
    for option in options:
        if option.lower() == name.lower():
            return option
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_key_message(name: str, table: Mapping[str, Key]) -> str:
    guess = suggest(name, table)
    hint = f"; did you mean {guess!r}?" if guess else ""
    return f"unknown key {name!r}{hint}"
