"""The config keys swapd knows (derived from `shape.py`): what it acts on, and what it accepts from
llama-swap and ignores.

Anything else is a warning, with a "did you mean" when a known key is close, and is then left
out as llama-swap leaves it out: a config llama-swap loads always loads here, a key llama-swap
adds tomorrow included. llama-swap itself says nothing, which turns a typo such as
`checkEndPoint` into a default nobody asked for; `strict` (`swapd check-config --strict`) makes
each an error. A top-level key whose value holds YAML anchors (`defs:` in llama-swap's own
tests) and `x-...` keys (docker compose's convention) are homes for anchors: accepted quietly.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, get_args, get_origin

import msgspec

from .issues import Report
from .keys import Ignored, fields, is_section, unwrap
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


@functools.cache
def keys_of(section: type[msgspec.Struct]) -> dict[str, Key]:
    """The key table of a section of `shape.py`, nested sections and entry mappings included."""
    table: dict[str, Key] = {}
    for info in fields(section):
        base, extras = unwrap(info.type)
        ignored = next((x for x in extras if isinstance(x, Ignored)), None)
        if ignored is not None:
            table[info.encode_name] = Key(ignored=True, note=ignored.note)
        elif is_section(base):
            table[info.encode_name] = Key(children=keys_of(base))
        elif get_origin(base) is dict and is_section(get_args(base)[1]):
            table[info.encode_name] = Key(entries=keys_of(get_args(base)[1]))
        else:
            table[info.encode_name] = Key()
    return table


@dataclass
class KeyCheck:
    """Checks parsed data against the table: unknown and ignored keys are warnings (unknown ones
    errors when `strict`); both are left out of what the loader reads further."""

    report: Report
    strict: bool = False
    ignored_paths: list[Path] = field(default_factory=list)

    def check(self, mapping: Mapping[str, object], table: Mapping[str, Key], path: Path) -> None:
        document = self.report.document
        for name, value in mapping.items():
            child = (*path, name)
            if not path and name.startswith(EXTENSION_PREFIX):
                self.ignored_paths.append(child)  # a home for YAML anchors, as in compose files
                continue
            key = table.get(name)
            if key is None:
                self.ignored_paths.append(child)
                if not path and document is not None and document.holds_anchors(child):
                    continue  # `defs:` and the like: it only holds anchors used elsewhere
                message = unknown_key_message(name, table)
                if self.strict:
                    self.report.error(child, message, key=True)
                else:
                    self.report.warn(
                        child, f"{message} (ignored, as llama-swap ignores it)", key=True
                    )
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


T = TypeVar("T")


def named_preset(presets: Mapping[str, T], name: str, where: Path, report: Report) -> T | None:
    """The preset `name` names (a `sleep` or `busyCheck` preset), or an error at `where` that
    lists them, with a "did you mean"."""
    preset = presets.get(name.strip())
    if preset is None:
        guess = suggest(name, presets)
        hint = f"; did you mean {guess!r}?" if guess else ""
        names = ", ".join(presets)
        report.error(where, f"unknown preset {name!r}: expected {names}{hint}")
    return preset


def known_keys(
    mapping: Mapping[str, Any], known: tuple[str, ...], where: Path, report: Report
) -> bool:
    """Whether `mapping` has only `known` keys; an error at each other key, with a "did you
    mean", when not (a setting's strict keys, where an unknown one is an error)."""
    unknown = [k for k in mapping if k not in known]
    for key in unknown:
        guess = suggest(str(key), known)
        hint = f"; did you mean {guess!r}?" if guess else ""
        report.error((*where, key), f"unknown key {key!r}{hint}", key=True)
    return not unknown
