"""systemd/swapd.service: `systemd-analyze verify` accepts it, and it says what DESIGN.md requires.

verify checks that ExecStart's binary exists, so it runs on a copy whose ExecStart points at this
checkout's venv instead of /opt/swapd (everything else unchanged). systemd-analyze is the real
part `systemd` (tests/support/realparts/plugin.py): installed from Debian's `systemd` package where
CI=true, so there these tests never skip. tests/real/test_systemd.py runs the unit under a real
systemd.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.realparts.plugin import _need
from tests.support.realparts.systemd_image import SystemdTools
from tests.support.systemd_unit import INSTALLED_SWAPD, UNIT


@pytest.fixture(scope="module")
def analyze() -> str:
    tools: SystemdTools = _need("systemd")
    return tools.analyze


def verify(analyze: str, tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    copy = tmp_path / "swapd.service"
    copy.write_text(text)
    return subprocess.run(
        [analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.systemd
def test_systemd_analyze_verify_accepts_the_unit(analyze: str, tmp_path: Path) -> None:
    swapd = Path(sys.executable).parent / "swapd"
    assert swapd.exists(), "the venv has no swapd script (pip install -e .)"
    text = UNIT.read_text()
    assert INSTALLED_SWAPD in text
    result = verify(analyze, tmp_path, text.replace(INSTALLED_SWAPD, str(swapd)))
    assert result.returncode == 0, result.stderr
    assert "swapd.service:" not in result.stderr, result.stderr  # no warning about the unit


@pytest.mark.systemd
def test_verify_would_catch_a_broken_unit(analyze: str, tmp_path: Path) -> None:
    # The check above can fail: a missing binary or a bad directive value is reported.
    missing = UNIT.read_text().replace(INSTALLED_SWAPD, str(tmp_path / "no-such-swapd"))
    assert verify(analyze, tmp_path, missing).returncode != 0
    swapd = str(Path(sys.executable).parent / "swapd")
    bad = (
        UNIT.read_text()
        .replace(INSTALLED_SWAPD, swapd)
        .replace("KillMode=mixed", "KillMode=gently")
    )
    # A warning names the unit file.
    assert "swapd.service:" in verify(analyze, tmp_path, bad).stderr
