"""The types are part of the suite, as the lint is (test_lint.py): mypy, configured in
pyproject.toml, must find no error in `daemon`, `proxy` and `ipc`."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO


def test_mypy_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
