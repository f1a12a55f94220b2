"""The shipped systemd unit, read as systemd reads it."""

from __future__ import annotations

from tests.support.paths import REPO

UNIT = REPO / "systemd" / "swapd.service"
# Where docs/install.md installs swapd, as the unit's ExecStart names it.
INSTALLED_SWAPD = "/opt/swapd/venv/bin/swapd"


def directives(text: str) -> dict[str, list[tuple[str, str]]]:
    sections: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            sections[current] = []
            continue
        key, _, value = line.partition("=")
        sections[current].append((key.strip(), value.strip()))
    return sections


def service() -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    for key, value in directives(UNIT.read_text())["Service"]:
        result.setdefault(key, []).append(value)
    return result
