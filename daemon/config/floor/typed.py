"""Sections of parsed YAML into the structs of `shape.py`, with msgspec doing the type checks.

Each field is converted on its own, so every wrong value in a file is reported, not only the first
(msgspec stops at one), and a wrong value reads as unset. msgspec's verdict is worded the way the
config errors always were (`expected an integer, got 'ten'`, `must be at least 0, got -1`). Two
rules are llama-swap's, not msgspec's: a string field takes any scalar as its text, as Go's YAML
decoder does (`name: 7` is the name "7"; with a warning, since it is rarely meant), and a list
of strings keeps its good items when some are bad, remembering where each was in the file so
later checks name the right index.

A setting written one of several ways (`sleep`, `busyCheck`, `kvCache`, `wakeProbe`: a preset
name or a mapping) has a `Section` for its mapping form, converted as any other: each wrong value
inside it is reported with its path, all of them at once, and the section's quirk reads what was
typed. Such a section is `strict` (an unknown key is an error, a number is not read as a string's
text); with an unknown key the whole setting reads as unset, so that its quirk says nothing more.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from types import UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import msgspec

from .issues import Report, describe
from .keys import (
    MAX_INT,
    MIN_INT,
    Exact,
    Expect,
    Falsy,
    Section,
    fields,
    is_section,
    unwrap,
)
from .macros import as_text
from .schema import known_keys
from .yaml_nodes import Path

S = TypeVar("S", bound=Section)
T = TypeVar("T")

_WORDS: dict[Any, str] = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    str: "a string",
    dict: "a mapping",
}
# msgspec's wording of a failed bound: "Expected `int` >= 1" (the value itself is not in it).
_BOUND = re.compile(r"Expected `[^`]+` (>=|<=) ")
_BAD = object()


def out_of_range(value: Any, path: Path) -> Iterator[Path]:
    """Where a free-form value (metadata, setParams) holds an integer msgpack cannot carry."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from out_of_range(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from out_of_range(item, (*path, index))
    elif isinstance(value, int) and not MIN_INT <= value <= MAX_INT:
        yield path


class Converter:
    def __init__(self, report: Report) -> None:
        self.report = report
        # For lists that lost bad items: the index in the file of each item kept (the report's,
        # so that a section's quirk reads them with a converter of its own).
        self.positions = report.positions

    def section(self, mapping: Mapping[str, Any], kind: type[S], path: Path) -> S:
        """`kind` from a mapping; fields whose value is wrong are reported and left unset."""
        values: dict[str, Any] = {}
        for info in fields(kind):
            raw = mapping.get(info.encode_name)
            if raw is None or (not raw and any(isinstance(x, Falsy) for x in unwrap(info.type)[1])):
                continue
            value = self._value(raw, info.type, (*path, info.encode_name), exact=kind.strict)
            if value is not _BAD:
                values[info.name] = value
        return kind(**values)

    def indexed(self, path: Path, items: tuple[T, ...] | None) -> list[tuple[int, T]]:
        """A converted list's items with their index in the file."""
        if not items:
            return []
        return list(zip(self.positions.get(path, range(len(items))), items, strict=True))

    def text(self, raw: Any, where: Path) -> str | None:
        """A scalar as its text (for fields read by hand); a list or mapping is reported."""
        value = self._scalar(raw, str, str, where, None)
        return None if value is _BAD else value

    def text_list(self, raw: Any, where: Path) -> list[tuple[int, str]]:
        """A list of strings read by hand: its good items with their index in the file."""
        if raw is None:
            return []
        value = self._texts(raw, where, None)
        return [] if value is _BAD else self.indexed(where, value)

    # -- one value ----------------------------------------------------------------------------

    def _value(self, raw: Any, annotation: Any, where: Path, *, exact: bool = False) -> Any:
        base, extras = unwrap(annotation)
        words = next((x for x in extras if isinstance(x, Expect)), None)
        if base is Any:
            return raw
        if get_origin(base) in (Union, UnionType):
            # A setting written one of several ways (`busyCheck`: a preset name or a mapping): a
            # mapping form that is a section is typed as one, the rest read by its section.
            arms = get_args(base)
            mapping = next((arm for arm in arms if is_section(arm)), None)
            if mapping is not None and isinstance(raw, dict):
                return self._setting(raw, mapping, where)
            kinds = tuple(get_origin(arm) or arm for arm in arms if not is_section(arm))
            # YAML's true is no integer, as Go's decoder has it (`every: true` is wrong).
            if isinstance(raw, kinds) and (bool in kinds or not isinstance(raw, bool)):
                return raw
            kinds += (dict,) if mapping is not None else ()
            return self._wrong(where, words or " or ".join(map(_words_for, kinds)), raw)
        if is_section(base):
            if not isinstance(raw, dict):
                return self._wrong(where, words or base.expected, raw)
            return self._setting(raw, base, where)
        origin = get_origin(base)
        if origin is dict:
            if not isinstance(raw, dict):
                return self._wrong(where, words or "a mapping", raw)
            entry = get_args(base)[1]
            if is_section(entry):
                return self._entries(raw, entry, where)
            return self._free(raw, where)
        if origin is tuple and get_args(base)[0] is not str:
            return self._items(raw, get_args(base)[0], where, words, exact)
        if origin is tuple:
            return self._texts(raw, where, words)
        exact = exact or any(isinstance(x, Exact) for x in extras)
        return self._scalar(raw, annotation, base, where, words, exact=exact)

    def _setting(self, raw: dict[str, Any], kind: type[S], where: Path) -> Any:
        """A setting's mapping form: unset after an unknown key (the rest is not read), else its
        section, a wrong value in it reported and left unset."""
        if kind.strict:
            names = tuple(info.encode_name for info in fields(kind))
            if not known_keys(raw, names, where, self.report):
                self.report.wrong += [(*where, key) for key in raw if key not in names]
                return _BAD
        return self.section(raw, kind, where)

    def _items(self, raw: Any, item: Any, where: Path, words: Expect | None, exact: bool) -> Any:
        """A list of settings (a `sleep`'s calls): each wrong item reported and left out, as a
        list of strings' (`indexed` gives the others' index in the file)."""
        if not isinstance(raw, list):
            return self._wrong(where, words or "a list", raw)
        values = [self._value(x, item, (*where, i), exact=exact) for i, x in enumerate(raw)]
        kept = [index for index, value in enumerate(values) if value is not _BAD]
        if len(kept) < len(values):
            self.positions[where] = tuple(kept)
        return tuple(values[index] for index in kept)

    def _entries(self, raw: dict[str, Any], kind: type[S], where: Path) -> dict[str, S]:
        entries = {}
        for name, body in raw.items():
            if not isinstance(body, dict):
                self._wrong((*where, name), kind.expected, body)
                continue
            entries[name] = self.section(body, kind, (*where, name))
        return entries

    def _free(self, raw: dict[str, Any], where: Path) -> Any:
        bad = list(out_of_range(raw, where))
        for path in bad:
            self._error(path, f"integer out of range ({MIN_INT} to {MAX_INT})")
        return _BAD if bad else raw

    def _texts(self, raw: Any, where: Path, words: Expect | None) -> Any:
        if not isinstance(raw, list):
            return self._wrong(where, words or "a list of strings", raw)
        kept: list[str] = []
        positions: list[int] = []
        for index, item in enumerate(raw):
            if item is None:
                self._error((*where, index), "expected a string, got null")
                continue
            text = self._scalar(item, str, str, (*where, index), None)
            if text is not _BAD:
                kept.append(text)
                positions.append(index)
        if len(kept) < len(raw):
            self.positions[where] = tuple(positions)
        return tuple(kept)

    def _scalar(
        self,
        raw: Any,
        annotation: Any,
        base: Any,
        where: Path,
        words: Expect | None,
        *,
        exact: bool = False,
    ) -> Any:
        if base is str and not exact and not isinstance(raw, str | dict | list):
            # Loaded as llama-swap loads it, but rarely meant: `aliases: [1]`, `apiKeys: [1, 2]`.
            text = as_text(raw)
            # An API key's value is never shown: warnings end up in logs.
            secret = where[:1] == ("apiKeys",) or where[-1:] == ("apiKey",)
            got = "a number or boolean" if secret else describe(raw)
            shown = "its text" if secret else repr(text)
            self.report.warn(
                where,
                f"expected a string, got {got}: read as {shown}, as llama-swap reads it (quote "
                "it if that is what you mean)",
            )
            raw = text
        if base is float and isinstance(raw, float) and not math.isfinite(raw):
            return self._wrong(where, "a finite number", raw)
        try:
            return msgspec.convert(raw, annotation)
        except msgspec.ValidationError as error:
            bound = _BOUND.match(str(error))
            if bound is None:
                return self._wrong(where, words or _words_for(base), raw)
            meta = next(x for x in get_args(unwrap_meta(annotation)) if isinstance(x, msgspec.Meta))
            if bound.group(1) == ">=":
                limit = f"{meta.ge:g}" if base is float else f"{meta.ge}"
                self._error(where, f"must be at least {limit}, got {raw}")
            else:
                self._error(where, f"must be at most {meta.le}, got {raw}")
            return _BAD

    def _wrong(self, where: Path, words: str | Expect, raw: Any) -> Any:
        expect = words if isinstance(words, Expect) else Expect(words)
        self._error(where, expect.said(describe(raw)))
        return _BAD

    def _error(self, where: Path, message: str) -> None:
        self.report.error(where, message)
        self.report.wrong.append(where)


def _words_for(base: Any) -> str:
    if is_section(base):
        return base.expected
    if get_origin(base) is Literal:
        return "one of " + ", ".join(str(choice) for choice in get_args(base))
    return _WORDS.get(base, str(base))


def unwrap_meta(annotation: Any) -> Any:
    """`Annotated[X, Meta(...)] | None` to its Annotated part."""
    for arg in (annotation, *get_args(annotation)):
        if any(isinstance(x, msgspec.Meta) for x in get_args(arg)):
            return arg
    return annotation
