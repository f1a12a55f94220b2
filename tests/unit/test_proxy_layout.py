"""The proxy's folders (docs/architecture.md, "Inside the proxy"): what each may import, that the
request path imports nothing from `observe/` (what it records goes through the context), and
that the module map in `proxy/__init__.py` names every module under its folder."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.paths import REPO

PROXY = REPO / "proxy"

# What a folder's modules may import, beside the standard and third-party libraries: another
# module of the same folder always; `ipc` is the contract both sides share.
ALLOWED: dict[str, tuple[str, ...]] = {
    # What every folder may stand on: errors, the request's account, path patterns.
    "floor": ("ipc",),
    "routing": ("ipc", "floor", "mirror"),
    "upstream": ("ipc", "floor"),
    "mirror": ("ipc", "floor", "upstream.address"),
    "observe": ("ipc", "floor", "mirror"),
    "api": ("ipc", "context", "floor", "mirror", "observe", "routing", "ui"),
    "dialects": (
        "ipc",
        "context",
        "floor",
        "mirror",
        "routing",
        "upstream",
        "pipeline",
        "api",
    ),
    "ui": (),
}
# The request path: what runs for every forwarded request between the front checks and the
# accounting stage.
REQUEST_PATH = ("pipeline", "admission", "forwarding", "loading", "routing", "upstream")


def _name(path: Path) -> str:
    """`upstream.relay`, `pipeline`, `mirror` (a package's own `__init__`)."""
    parts = path.relative_to(PROXY).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The proxy modules (or `ipc...`) that `path` imports, relative imports resolved."""
    package = path.relative_to(PROXY).parent.parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = list(package[: len(package) - (node.level - 1)])
        if node.level - 1 > len(package):  # above the proxy: `...ipc`
            found.add(".".join(["ipc", *(node.module or "").split(".")[1:]]).rstrip("."))
            continue
        module = [*base, *(node.module.split(".") if node.module else [])]
        for alias in node.names:
            # `from ..api import capabilities` imports the module `api.capabilities`.
            below = PROXY.joinpath(*module, alias.name)
            is_module = below.with_suffix(".py").exists() or below.is_dir()
            found.add(".".join([*module, alias.name] if is_module else module))
    return found


def _modules() -> list[Path]:
    return sorted(PROXY.rglob("*.py"))


def test_each_folder_imports_only_what_it_may() -> None:
    wrong = []
    for path in _modules():
        module = _name(path)
        folder = module.split(".")[0]
        if folder not in ALLOWED or "." not in module:
            continue  # the top may import anything of the proxy's
        for target in _imports(path):
            own = target.split(".")[0] == folder
            if not own and not any(
                target == a or target.startswith(a + ".") for a in ALLOWED[folder]
            ):
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_the_request_path_imports_nothing_from_observe() -> None:
    found = [
        f"{_name(path)} imports {target}"
        for path in _modules()
        if _name(path).split(".")[0] in REQUEST_PATH
        for target in _imports(path)
        if target.split(".")[0] == "observe"
    ]
    assert found == []


def test_the_module_map_names_every_module_under_its_folder() -> None:
    doc = (PROXY / "__init__.py").read_text()
    sections: dict[str, set[str]] = {}
    current = None
    for line in doc.splitlines():
        heading = re.match(r"(?:`(\w+)/`:|(The top):)", line)
        if heading:
            current = heading.group(1) or ""
            sections[current] = set()
        if current is not None:
            sections[current] |= set(re.findall(r"`(\w+)`", line))
    missing = []
    for path in _modules():
        parts = path.relative_to(PROXY).with_suffix("").parts
        if parts[-1] == "__init__":
            continue
        folder = parts[0] if len(parts) > 1 else ""
        if parts[-1] not in sections.get(folder, set()):
            missing.append(".".join(parts))
    assert missing == []
    assert set(sections) == {"", *ALLOWED}  # every folder has its section


def test_no_folder_imports_a_top_module_that_imports_that_folder() -> None:
    """The folders stand under the top: one that needs a top module (`context`, `pipeline`)
    imports it only where that module needs nothing of the folder (no import runs back up)."""
    top = {_name(path): _imports(path) for path in _modules() if "." not in _name(path)}
    back = []
    for path in _modules():
        module = _name(path)
        folder = module.split(".")[0]
        if folder not in ALLOWED or "." not in module:
            continue
        for target in _imports(path):
            if target in top and any(t.split(".")[0] == folder for t in top[target]):
                back.append(f"{module} imports {target}, which imports {folder}/")
    assert back == []
