"""systemd/swapd.service: `systemd-analyze verify` accepts it, and it says what DESIGN.md requires.

verify checks that ExecStart's binary exists, so it runs on a copy whose ExecStart points at this
checkout's venv instead of /opt/swapd (everything else unchanged). systemd-analyze is the real
part `systemd` (tests/realparts/plugin.py): installed from Debian's `systemd` package where CI=true,
so there these tests never skip. tests/test_systemd_real.py runs the unit under a real systemd.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.realparts.plugin import _need
from tests.realparts.systemd_image import SystemdTools

UNIT = Path(__file__).resolve().parent.parent / "systemd" / "swapd.service"
INSTALLED_SWAPD = "/opt/swapd/venv/bin/swapd"


@pytest.fixture(scope="module")
def analyze() -> str:
    tools: SystemdTools = _need("systemd")
    return tools.analyze


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


def test_unit_settings() -> None:
    svc = service()
    assert svc["ExecStart"] == [
        f"{INSTALLED_SWAPD} run -c /etc/swapd/config.yaml --run-dir /run/swapd"
    ]
    expected = {
        "Type": "notify",
        "NotifyAccess": "all",
        "KillMode": "mixed",
        "RuntimeDirectory": "swapd",
        "RuntimeDirectoryMode": "0700",
        "RuntimeDirectoryPreserve": "restart",
        # Learned GPU footprints (docs/gpus.md) outlive restarts and reboots.
        "StateDirectory": "swapd",
        "UMask": "0077",
        "Restart": "on-failure",
    }
    assert {key: svc[key][-1] for key in expected} == expected
    assert int(svc["WatchdogSec"][-1]) > 0
    assert int(svc["TimeoutStopSec"][-1]) > 0
    assert "CIRCUSCTL_ENDPOINT=ipc:///run/swapd/circus-ctl.sock" in svc["Environment"]
    # swapd's circusd hands SIGHUP to the daemon as a reload (tests/test_hot_reload_stack.py).
    assert svc["ExecReload"] == ["/bin/kill -HUP $MAINPID"]


def test_circusctl_endpoint_matches_the_run_dir_layout() -> None:
    from swapd.ipc.endpoints import Endpoints

    assert Endpoints(Path("/run/swapd")).circus_ctl == "ipc:///run/swapd/circus-ctl.sock"
