"""Every package folder ships: a folder missing from pyproject's package list installs fine in
editable mode (the suite's) and is absent from a wheel (`pip install .`, the systemd unit's)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.support.paths import REPO


def test_every_package_folder_is_in_the_wheel() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for name, folder in setuptools["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO / folder).parts
            found.add(".".join((name, *parts)))
    assert found == listed


def test_the_web_ui_files_are_in_the_wheel(tmp_path: Path) -> None:
    """The UI's static files are package data: a wheel built from this tree holds every one of
    them (a pattern missing from `package-data` would leave the page without them)."""
    import subprocess
    import sys
    import zipfile

    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = tmp_path.glob("swapd-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    static = REPO / "proxy" / "ui" / "static"
    files = sorted(p.name for p in static.iterdir() if p.is_file())
    assert {"index.html", "app.css", "main.js"} <= set(files)
    missing = [f for f in files if f"swapd/proxy/ui/static/{f}" not in names]
    assert missing == []
