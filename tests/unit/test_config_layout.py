"""The config package's storeys (docs/architecture.md, "The config seam"): the code outside it
imports only from `daemon/config/__init__.py`; `floor/` imports nothing of the package above it;
`sections/` imports neither the pipeline nor what it feeds."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

CONFIG = REPO / "daemon" / "config"
# The pipeline and what it feeds, above the sections.
ABOVE_SECTIONS = {"loader", "render", "check", "stages", "sources", "embedded"}


def _config_imports(path: Path, text: str | None = None) -> set[str]:
    """The modules of `daemon/config/` that `path` (or `text`, as if it were there) imports ("" is
    the package itself), relative imports resolved; a name imported from a package counts as its
    module when it is one."""
    package = path.relative_to(REPO).parent.parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            if node.level - 1 > len(package):
                continue
            target = [*package[: len(package) - (node.level - 1)]]
            target += node.module.split(".") if node.module else []
        elif node.module and node.module.startswith("swapd."):
            target = node.module.split(".")[1:]
        else:
            continue
        if target[:2] != ["daemon", "config"]:
            continue
        inner = target[2:]
        for alias in node.names:
            module = [*inner, alias.name]
            is_module = CONFIG.joinpath(*module).with_suffix(".py").exists()
            is_package = CONFIG.joinpath(*module, "__init__.py").exists()
            found.add(".".join(module if is_module or is_package else inner))
    return found


def _sources(*folders: str) -> list[Path]:
    return [path for folder in folders for path in (REPO / folder).rglob("*.py")]


def test_the_code_outside_imports_the_config_from_its_package_only() -> None:
    outside = [p for p in _sources("daemon", "proxy", "ipc") if CONFIG not in p.parents]
    reaching = {
        str(path.relative_to(REPO)): sorted(names)
        for path in outside
        if (names := _config_imports(path) - {""})
    }
    assert not reaching, f"import from daemon/config/__init__.py instead: {reaching}"


def test_the_floor_imports_nothing_above_it() -> None:
    for path in (CONFIG / "floor").rglob("*.py"):
        above = {name for name in _config_imports(path) if not name.startswith("floor")}
        assert not above, f"{path.relative_to(REPO)} imports {sorted(above)}"


def test_the_sections_import_neither_the_pipeline_nor_what_it_feeds() -> None:
    for path in (CONFIG / "sections").rglob("*.py"):
        above = {name for name in _config_imports(path) if name in ABOVE_SECTIONS}
        assert not above, f"{path.relative_to(REPO)} imports {sorted(above)}"


def test_a_reach_past_the_package_is_seen() -> None:
    # The check's own check, on the form five modules outside used before (issue 36).
    where = REPO / "daemon" / "machinery" / "example.py"
    text = (
        "from ..config.sections.busy_check_fields import BusyCheck\nfrom ..config import Config\n"
    )
    assert _config_imports(where, text) == {"sections.busy_check_fields", ""}
