"""The daemon process's modules (docs/architecture.md, "The layout"): the `swapd` command line in
`daemon/cli/` is apart from them, so nothing outside `cli/` imports it (what both need, such as
the watcher names and the run directory's files, lives in `ipc/`)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

DAEMON = REPO / "daemon"


def _imports_cli(path: Path) -> list[str]:
    """The lines of `path` that import from `daemon/cli/`, relative imports resolved."""
    package = path.relative_to(REPO).parent.parts
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = package[: len(package) - (node.level - 1)]
        target = (*base, *(node.module.split(".") if node.module else ()))
        names = [a.name for a in node.names]
        if target[:2] == ("daemon", "cli") or (target == ("daemon",) and "cli" in names):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_the_daemon_process_imports_nothing_from_the_command_line() -> None:
    modules = [p for p in DAEMON.rglob("*.py") if "cli" not in p.relative_to(DAEMON).parts]
    assert len(modules) > 50
    assert [line for p in sorted(modules) for line in _imports_cli(p)] == []
