"""The proxy writes and reads none of aiohttp's private state, which changes from release to
release (3.14 renamed the connection handler's parser and bounded its message queue): no module
reaches into another object's private names, and a class built on one of aiohttp's touches only
the private names it declares itself, none of them aiohttp's."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap

from swapd import proxy
from tests.support.paths import REPO

PROXY = REPO / "proxy"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_reaches_into_another_objects_private_names() -> None:
    found = []
    for path in sorted(PROXY.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def _aiohttp_private(cls: type) -> set[str]:
    names: set[str] = set()
    for base in cls.__mro__:
        if base.__module__.split(".")[0] != "aiohttp":
            continue
        names |= {n for n in vars(base) if _private(n)}
        slots = vars(base).get("__slots__", ())
        names |= {n for n in ((slots,) if isinstance(slots, str) else slots) if _private(n)}
    return names


def test_classes_built_on_aiohttps_touch_only_their_own_private_names() -> None:
    checked = []
    for info in pkgutil.walk_packages(proxy.__path__, prefix="swapd.proxy."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            theirs = _aiohttp_private(cls)
            if cls.__module__ != info.name or not theirs:
                continue
            checked.append(cls.__name__)
            slots = set(vars(cls).get("__slots__", ()))
            methods = {n for n, v in vars(cls).items() if callable(v)}
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
            used = {
                node.attr
                for node in ast.walk(tree)
                if isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and _private(node.attr)
            }
            own = slots | methods
            assert used <= own, (cls.__name__, sorted(used - own))
            assert not own & theirs, (cls.__name__, sorted(own & theirs))
    assert "SwapdRequestHandler" in checked  # the connection handler is one of them
