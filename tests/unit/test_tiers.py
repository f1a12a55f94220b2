"""The tier check (tests/support/tiers.py): a test's markers must agree with its folder."""

from __future__ import annotations

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
