"""The test command is written three times: the README (what a user runs), docs/testing.md
(which quotes it) and `.ci/run` (which runs it "verbatim"). They must stay one command."""

from __future__ import annotations

from pathlib import Path

from tests.support.paths import REPO

MARK = "python3 -m venv .venv && .venv/bin/pip install -q -e "


def _command_in(path: Path) -> str:
    (line,) = [line for line in path.read_text().splitlines() if line.startswith(MARK)]
    return line


def test_readme_docs_and_ci_run_the_same_command() -> None:
    readme = _command_in(REPO / "README.md")
    assert _command_in(REPO / "docs" / "testing.md") == readme
    assert _command_in(REPO / ".ci" / "run") == readme
    assert " -n " in readme and "--dist loadgroup" in readme  # parallel, with the groups
