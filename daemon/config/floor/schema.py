"""The config keys swapd knows (derived from `shape.py`): what it acts on, and what it accepts from
llama-swap and ignores.

Anything else is a warning, with a "did you mean" when a known key is close, and is then left
out as llama-swap leaves it out: a config llama-swap loads always loads here, a key llama-swap
adds tomorrow included. llama-swap itself says nothing, which turns a typo such as
`checkEndPoint` into a default nobody asked for; `strict` (`swapd check-config --strict`) makes
each an error. A top-level key whose value holds YAML anchors (`defs:` in llama-swap's own
tests) and `x-...` keys (docker compose's convention) are homes for anchors: accepted quietly.
A near miss of a security key (`apikeys:`, `api_keys:`, `security.cros`) is an error, strict or
not: ignored, it would start swapd, or apply a reload, with no API key (fail closed).
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
                message = unknown_key_message(name, table)
                if security_near_miss(name, path, table):
                    self.report.error(child, f"{message} ({NEAR_MISS})", key=True)
                    continue
                if not path and document is not None and document.holds_anchors(child):
                    continue  # `defs:` and the like: it only holds anchors used elsewhere
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


# Keys that turn protection on: misspelt, a warning would start swapd (or apply a reload) with
# it off, so a near miss of one is an error whatever llama-swap does (fail closed).
SECURITY_KEYS = frozenset({"apiKeys", "security"})
_SECURITY_SECTION = "security"
NEAR_MISS = (
    "a near miss of a security key is an error, not a warning: ignored, it would leave "
    "swapd unprotected"
)


def security_near_miss(name: str, path: Path, table: Mapping[str, Key]) -> bool:
    """Whether the unknown key `name` at `path` is a near miss of a security key: `apiKeys` or
    `security` at the top (`apikeys`, `api_keys`, `ApiKeys`, `apiKey`), or any key under
    `security` (`security.cros`): once case, `_` and `-` are left out, at most two typos away (a
    letter added, dropped, changed, or two swapped; one for a key of four letters or fewer)."""
    if path:
        candidates = list(table) if path[0] == _SECURITY_SECTION else []
    else:
        candidates = [key for key in table if key in SECURITY_KEYS]
    folded = _fold(name)
    for candidate in candidates:
        target = _fold(candidate)
        if _typos(folded, target) <= (1 if len(target) <= 4 else 2):
            return True
    return False


def _fold(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def _typos(a: str, b: str) -> int:
    """The edit distance of `a` and `b`, a swap of two neighbours counting as one edit (optimal
    string alignment)."""
    if abs(len(a) - len(b)) > 2:
        return 3  # more than any near miss: no need to count
    before: list[int] = []
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        above, row = row, [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(above[j] + 1, row[j - 1] + 1, above[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], before[j - 2] + 1)
        before = above
    return row[len(b)]


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
