"""llama-swap's macros: `${env.NAME}`, user macros, and the leftover check.

Substitution follows llama-swap (reference §1.5): the effective list is
`[MODEL_ID] + globals + model macros` (a model macro with a global's name replaces it in place),
walked once in reverse declaration order, so a macro may use macros declared before it and not
after; a string that is exactly `${m}` takes m's typed value. `${PORT}` and `${GPUS}` are filled
later by the loader, `${PID}` at stop time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .issues import Report, describe
from .yaml_nodes import Document, Path, resolve_plain

Macro = tuple[str, Any]

RESERVED = ("PORT", "PID", "MODEL_ID", "GPUS", "KV_DIR")
MAX_NAME_LENGTH = 63
# Macros that use macros multiply (ten uses of a macro of ten uses of ...): a value that grows past
# this is refused before it can take the machine's memory.
MAX_EXPANDED_LENGTH = 1 << 20
_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
_ENV_REF = re.compile(r"\$\{env\.([A-Za-z_][A-Za-z0-9_]*)\}")
_ANY_REF = re.compile(r"\$\{([^}]*)\}")


def as_text(value: Any) -> str:
    """A typed macro value embedded in a longer string (Go's formatting for bools)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def substitute_env(
    value: Any, path: Path, environ: Mapping[str, str], document: Document, report: Report
) -> Any:
    """Replace `${env.NAME}`; an unquoted scalar is re-typed as if the value had been written."""
    if isinstance(value, dict):
        return {
            k: substitute_env(v, (*path, k), environ, document, report) for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            substitute_env(v, (*path, i), environ, document, report) for i, v in enumerate(value)
        ]
    if not isinstance(value, str) or "${env." not in value:
        return value

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            report.error(
                path,
                f"environment variable {name!r} is not set (used as ${{env.{name}}})",
                line=document.find_line(path, match.group(0)),
            )
            return match.group(0)
        return environ[name]

    result = _ENV_REF.sub(replace, value)
    if result != value and path in document.plain_strings:
        return resolve_plain(result)
    return result


def declare(raw: Any, path: Path, report: Report) -> list[Macro]:
    """Validate a `macros` mapping; return its usable entries in declaration order."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        report.error(path, f"expected a mapping of macro names to values, got {describe(raw)}")
        return []
    names = list(raw)
    macros: list[Macro] = []
    for index, (name, value) in enumerate(raw.items()):
        where = (*path, name)
        if name in RESERVED:
            report.error(where, f"macro name {name!r} is reserved", key=True)
            continue
        if len(name) > MAX_NAME_LENGTH or not _NAME.match(name):
            report.error(
                where,
                f"invalid macro name {name!r}: use letters, digits, '_' and '-' "
                f"(at most {MAX_NAME_LENGTH} characters)",
                key=True,
            )
            continue
        if value is None or isinstance(value, dict | list):
            report.error(
                where,
                f"macro {name!r} must be a string, number or boolean, got {describe(value)}",
            )
            continue
        if isinstance(value, str):
            used = set(_ANY_REF.findall(value))
            if name in used:
                report.error(where, f"macro {name!r} refers to itself")
                continue
            later = sorted(used & set(names[index + 1 :]))
            if later:
                # Still declared: where it is used, the leftover ${later} is reported as well.
                report.error(
                    where,
                    f"macro {name!r} uses ${{{later[0]}}}, which is defined after it "
                    "(a macro may only use macros defined before it)",
                )
        macros.append((name, value))
    return macros


def scope(
    model_id: str, global_macros: Sequence[Macro], model_macros: Sequence[Macro]
) -> list[Macro]:
    """The effective list for one model: MODEL_ID first, so it is substituted last."""
    own = dict(model_macros)
    effective: list[Macro] = [("MODEL_ID", model_id)]
    effective += [(name, own.pop(name, value)) for name, value in global_macros]
    effective += [(name, value) for name, value in model_macros if name in own]
    return effective


class ExpansionTooLarge(Exception):
    """A value grew past MAX_EXPANDED_LENGTH while its macros were substituted."""

    def __init__(self, path: Path, name: str) -> None:
        super().__init__(
            f"expanding ${{{name}}} makes this value longer than {MAX_EXPANDED_LENGTH} characters"
        )
        self.path = path


def expand(value: Any, macros: Sequence[Macro], path: Path = ()) -> Any:
    """Substitute macros into every string of a value (map keys are left alone).
    Raises ExpansionTooLarge, naming `path` or the path below it."""
    if isinstance(value, dict):
        return {k: expand(v, macros, (*path, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, macros, (*path, i)) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value
    current: Any = value
    for name, replacement in reversed(macros):
        if not isinstance(current, str):
            break
        token = f"${{{name}}}"
        if current == token:
            current = replacement
        elif token in current:
            text = as_text(replacement)
            grown = len(current) + current.count(token) * (len(text) - len(token))
            if grown > max(len(current), MAX_EXPANDED_LENGTH):  # only growth counts
                raise ExpansionTooLarge(path, name)
            current = current.replace(token, text)
    return current


def references(value: Any, path: Path) -> Iterator[tuple[Path, str]]:
    """Every `${...}` left in the strings of a value, with where it is."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from references(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from references(v, (*path, i))
    elif isinstance(value, str):
        for name in _ANY_REF.findall(value):
            yield path, name


_UNTERMINATED = re.compile(r"\$\{[^}]*$")


def unterminated(value: Any, path: Path) -> Iterator[tuple[Path, str]]:
    """Every `${` with no `}` after it in the strings of a value (llama-swap keeps it as text)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from unterminated(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from unterminated(v, (*path, i))
    elif isinstance(value, str) and "${" in value:
        found = _UNTERMINATED.search(value)
        if found is not None:
            yield path, found.group(0).split()[0] if found.group(0).split() else found.group(0)
