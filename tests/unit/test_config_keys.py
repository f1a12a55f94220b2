"""A key declared once (config/floor/keys.py): from one field with a `Key`, its default, what it
inherits, llama-swap's "0 means the default", its check, its quirk and its `--print` row."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pytest

from swapd.daemon.config.floor import keys
from swapd.daemon.config.floor.issues import Report
from swapd.daemon.config.floor.keys import Count, Inherit, Key, Quirks, Section, resolve, shown
from swapd.daemon.config.floor.schema import keys_of
from swapd.daemon.config.floor.typed import Converter
from swapd.daemon.config.floor.yaml_nodes import Path


def _no_more_than_nine(value: int, where: Path, report: Report) -> None:
    if value > 9:
        report.error(where, f"at most 9, got {value}")


class Example(Section, frozen=True):
    max_queue: Annotated[Count, Key(Inherit("maxQueue"), unset=(0,))] | None = None
    retries: Annotated[Count, Key(3, check=_no_more_than_nine)] | None = None
    label: Annotated[str, Key(render=lambda r: {"label": r.label.upper()})] | None = None
    hidden: Annotated[bool, Key(False, render=None)] | None = None
    undeclared: int | None = None


QUIRKS = Quirks(Example)


@QUIRKS.read("label")
def _label(value: str | None, where: Path, report: Report) -> str:
    return (value or "none").strip()


class Resolved(msgspec.Struct, frozen=True):
    max_queue: int
    retries: int
    label: str
    hidden: bool


def _load(mapping: dict[str, Any]) -> tuple[Resolved | None, Report]:
    report = Report("example.yaml")
    spec = Converter(report).section(mapping, Example, ("models", "m"))
    values = resolve(spec, ("models", "m"), report, {"maxQueue": 100}, QUIRKS).fields
    return (None if report.errors else Resolved(**values)), report


def test_one_field_gives_the_default_the_inherited_value_and_the_quirk() -> None:
    resolved, _ = _load({})
    assert resolved == Resolved(max_queue=100, retries=3, label="none", hidden=False)
    resolved, _ = _load({"maxQueue": 0, "retries": 5, "label": " x "})
    assert resolved == Resolved(max_queue=100, retries=5, label="x", hidden=False)
    resolved, _ = _load({"maxQueue": 7})
    assert resolved is not None and resolved.max_queue == 7


def test_its_type_bounds_and_check_are_errors_at_the_key() -> None:
    _, report = _load({"maxQueue": -1, "retries": 12})
    assert [(i.path, i.message) for i in report.errors] == [
        ("models.m.maxQueue", "must be at least 0, got -1"),
        ("models.m.retries", "at most 9, got 12"),
    ]


def test_it_joins_the_known_keys_and_print_shows_it_in_the_fields_order() -> None:
    assert list(keys_of(Example)) == ["maxQueue", "retries", "label", "hidden", "undeclared"]
    resolved, _ = _load({"label": "q"})
    assert shown(Example, resolved) == {"maxQueue": 100, "retries": 3, "label": "Q"}


def test_a_quirk_names_a_declared_key() -> None:
    with pytest.raises(ValueError, match="declares no key 'undeclared'"):
        QUIRKS.read("undeclared")
    assert [item.name for item in keys.declared(Example)] == [
        "maxQueue",
        "retries",
        "label",
        "hidden",
    ]
