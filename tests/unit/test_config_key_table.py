"""docs/configuration.md's key tables are held to the declarations in `config/shape.py`: each key
the file can hold has a row (itself, or rows for its keys), and each row names a declared key."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import pytest

from swapd.daemon.config import shape
from swapd.daemon.config.floor.schema import Key, keys_of
from swapd.daemon.config.sections.sleep_fields import WRITTEN
from tests.support.paths import REPO

DOC = REPO / "docs" / "configuration.md"


def _rows(heading: str) -> list[str]:
    """The key column's names of the table under `heading`."""
    text = DOC.read_text()
    start = text.index(f"\n{heading}\n")
    table = text[start : text.index("\n#", start + 1)]
    names: list[str] = []
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        names += re.findall(r"`([^`]+)`", line.split(" | ")[0])
    return names


def _declared(table: Mapping[str, Key], prefix: str = "") -> Iterator[tuple[str, Key]]:
    for name, key in table.items():
        if key.ignored:
            continue  # listed under "llama-swap keys swapd accepts but ignores"
        yield f"{prefix}{name}", key
        if key.children is not None:
            yield from _declared(key.children, f"{prefix}{name}.")


def _check(table: Mapping[str, Key], documented: list[str]) -> None:
    declared = dict(_declared(table))
    unknown = [name for name in documented if name not in declared and name != "x-..."]
    assert not unknown, f"rows for keys no section declares: {unknown}"
    missing = [
        name
        for name in declared
        if name not in documented
        and not any(row.startswith(f"{name}.") for row in documented)
        and not any(name.startswith(f"{row}.") for row in documented)
    ]
    assert not missing, f"declared keys without a row: {missing}"


def test_every_top_level_key_has_a_row_and_every_row_a_key() -> None:
    _check(keys_of(shape.Top), _rows("## Top-level keys"))


def test_every_model_key_has_a_row_and_every_row_a_key() -> None:
    _check(keys_of(shape.Model), _rows("## Model keys (`models.<id>`)"))


@pytest.mark.parametrize(
    ("section", "heading"),
    [(shape.Top, "## Top-level keys"), (shape.Model, "## Model keys (`models.<id>`)")],
)
def test_a_key_added_without_a_row_fails(section: type[shape.Section], heading: str) -> None:
    with pytest.raises(AssertionError, match="without a row"):
        _check({**keys_of(section), "brandNewKey": Key()}, _rows(heading))


def _sleep_rows() -> list[str]:
    """The key column of the `sleep` section's key table (the one headed `| key | value |`)."""
    text = DOC.read_text()
    start = text.index("\n### `sleep`\n")
    section = text[start : text.index("\n#", start + 1)]
    table = section[section.index("\n| key | value |") :]
    names: list[str] = []
    for line in table.splitlines()[3:]:
        if not line.startswith("| `"):
            break
        names += re.findall(r"`([^`]+)`", line.split(" | ")[0])
    return names


def test_every_sleep_key_has_a_row_and_every_row_a_key() -> None:
    # `sleep`'s mapping form is read by its preset step (sections/sleep_fields.py), which
    # declares the keys it takes.
    assert sorted(_sleep_rows()) == sorted(WRITTEN.settings)
