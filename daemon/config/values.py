"""Typed reads of parsed YAML values; a wrong type is reported (never raised) and reads as unset.

A null value counts as unset, as it does when llama-swap decodes onto its defaults. String fields
take any scalar as its text, as Go's YAML decoder does (`name: 7` is the name "7").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .issues import Report, describe
from .macros import as_text
from .yaml_nodes import Path

# msgpack, which carries the config to the proxy, holds integers in 64 bits.
MIN_INT = -(2**63)
MAX_INT = 2**63 - 1


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


class Reader:
    def __init__(self, report: Report) -> None:
        self.report = report

    def _wrong(self, path: Path, expected: str, value: Any) -> None:
        self.report.error(path, f"expected {expected}, got {describe(value)}")

    def integer(
        self, mapping: Mapping[str, Any], path: Path, key: str, *, minimum: int | None = None
    ) -> int | None:
        value = mapping.get(key)
        where = (*path, key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self._wrong(where, "an integer", value)
            return None
        if minimum is not None and value < minimum:
            self.report.error(where, f"must be at least {minimum}, got {value}")
            return None
        if value > MAX_INT:
            self.report.error(where, f"must be at most {MAX_INT}, got {value}")
            return None
        return value

    def number(
        self, mapping: Mapping[str, Any], path: Path, key: str, *, minimum: float | None = None
    ) -> float | None:
        value = mapping.get(key)
        where = (*path, key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self._wrong(where, "a number", value)
            return None
        if value != value or value in (float("inf"), float("-inf")):
            self._wrong(where, "a finite number", value)
            return None
        if minimum is not None and value < minimum:
            self.report.error(where, f"must be at least {minimum:g}, got {value}")
            return None
        return float(value)

    def boolean(self, mapping: Mapping[str, Any], path: Path, key: str) -> bool | None:
        value = mapping.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            self._wrong((*path, key), "true or false", value)
            return None
        return value

    def text(self, mapping: Mapping[str, Any], path: Path, key: str) -> str | None:
        return self.scalar_text(mapping.get(key), (*path, key))

    def scalar_text(self, value: Any, where: Path) -> str | None:
        if value is None:
            return None
        if isinstance(value, dict | list):
            self._wrong(where, "a string", value)
            return None
        return value if isinstance(value, str) else as_text(value)

    def text_list(
        self, mapping: Mapping[str, Any], path: Path, key: str
    ) -> list[tuple[int, str]] | None:
        """A list of strings as (index in the file, text); bad items are reported and left out."""
        value = mapping.get(key)
        where = (*path, key)
        if value is None:
            return None
        if not isinstance(value, list):
            self._wrong(where, "a list of strings", value)
            return None
        items = []
        for index, item in enumerate(value):
            if item is None:
                self.report.error((*where, index), "expected a string, got null")
                continue
            text = self.scalar_text(item, (*where, index))
            if text is not None:
                items.append((index, text))
        return items

    def mapping(self, mapping: Mapping[str, Any], path: Path, key: str) -> dict[str, Any] | None:
        value = mapping.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self._wrong((*path, key), "a mapping", value)
            return None
        return value

    def free_mapping(
        self, mapping: Mapping[str, Any], path: Path, key: str
    ) -> dict[str, Any] | None:
        """A mapping of anything (metadata, setParams) that must still fit the IPC codec."""
        value = self.mapping(mapping, path, key)
        if value is None:
            return None
        bad = list(out_of_range(value, (*path, key)))
        for where in bad:
            self.report.error(where, f"integer out of range ({MIN_INT} to {MAX_INT})")
        return None if bad else value
