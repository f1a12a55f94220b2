"""The suite's tiers are its folders, and a test's markers must agree with its folder:

- `tests/unit/`: swapd's code in the test's own process (a helper process at most: a circus
  watcher's child, `swapd check-config`), no stack; none of the tiers' markers.
- `tests/stack/`: the real swapd (circusd, daemon, proxy) with real upstream processes on
  loopback; the marker `processes`.
- `tests/real/`: the real parts (docker, llama.cpp, systemd, chromium); one of `REAL_MARKERS`.

A test whose markers disagree with its folder stops the collection with a list of them, so `-m`
selections (`-m "not processes"`, `-m docker`) and the folders never tell two stories.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

REAL_MARKERS = frozenset({"docker", "llamacpp", "systemd", "browser"})
TIERS = ("unit", "stack", "real")


def tier_of(nodeid: str) -> str | None:
    parts = nodeid.split("::", 1)[0].split("/")
    if len(parts) >= 3 and parts[0] == "tests" and parts[1] in TIERS:
        return parts[1]
    return None


def problem(nodeid: str, markers: Iterable[str]) -> str | None:
    """Why `nodeid` with `markers` is in the wrong folder, or None."""
    names = set(markers)
    real = names & REAL_MARKERS
    match tier_of(nodeid):
        case "unit" if real or "processes" in names:
            return f"{nodeid}: in tests/unit/ but marked {sorted(real | (names & {'processes'}))}"
        case "stack" if real:
            return f"{nodeid}: in tests/stack/ but marked {sorted(real)}: move it to tests/real/"
        case "stack" if "processes" not in names:
            return f"{nodeid}: in tests/stack/ without the marker `processes`"
        case "real" if not real:
            return f"{nodeid}: in tests/real/ without one of the markers {sorted(REAL_MARKERS)}"
        case None:
            return f"{nodeid}: not in a tier's folder ({', '.join(f'tests/{t}/' for t in TIERS)})"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    found = [
        p
        for item in items
        if (p := problem(item.nodeid, (m.name for m in item.iter_markers()))) is not None
    ]
    if found:
        raise pytest.UsageError("tests in the wrong tier:\n" + "\n".join(found))
