"""The tier check (tests/support/tiers.py): a test's markers must agree with its folder."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.tiers import problem


@pytest.mark.parametrize(
    ("nodeid", "markers"),
    [
        ("tests/unit/test_x.py::test_a", []),
        ("tests/unit/test_x.py::test_a[1]", ["parametrize", "asyncio"]),
        ("tests/stack/test_x.py::test_a", ["processes"]),
        ("tests/real/test_x.py::test_a", ["processes", "docker"]),
        ("tests/real/test_x.py::test_a", ["systemd"]),
    ],
)
def test_agreeing_markers_pass(nodeid: str, markers: list[str]) -> None:
    assert problem(nodeid, markers) is None


@pytest.mark.parametrize(
    ("nodeid", "markers", "said"),
    [
        ("tests/unit/test_x.py::test_a", ["processes"], "in tests/unit/ but marked"),
        ("tests/unit/test_x.py::test_a", ["browser"], "in tests/unit/ but marked"),
        ("tests/stack/test_x.py::test_a", [], "without the marker `processes`"),
        ("tests/stack/test_x.py::test_a", ["processes", "llamacpp"], "move it to tests/real/"),
        ("tests/real/test_x.py::test_a", ["processes"], "without one of the markers"),
        ("tests/test_x.py::test_a", [], "not in a tier's folder"),
    ],
)
def test_disagreeing_markers_are_named(nodeid: str, markers: list[str], said: str) -> None:
    found = problem(nodeid, markers)
    assert found is not None and said in found and nodeid in found


def test_no_test_module_imports_another() -> None:
    """Helpers live in tests/support/; a test module that imports from another test module (or a
    tier package) couples two files that should change alone."""
    root = Path(__file__).resolve().parents[1]
    tiers = ("tests.unit", "tests.stack", "tests.real")
    found = []
    for path in sorted(root.glob("*/test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else [f".{node.module or ''}"]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.startswith(tiers) or name.startswith(".") or name.startswith("test_"):
                    found.append(f"{path.relative_to(root)}:{node.lineno} imports {name}")
    assert len(list(root.glob("*/test_*.py"))) > 100  # the walk found the tiers
    assert found == []
