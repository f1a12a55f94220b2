"""The code standard is part of the suite: ruff's lint rules and formatter must pass on the tree."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO

ROOT = REPO


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_ruff_lint_is_clean() -> None:
    result = _ruff("check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = _ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr
