"""systemd/swapd.service says what DESIGN.md requires, read as text (no systemd needed)."""

from __future__ import annotations

from pathlib import Path

from tests.support.systemd_unit import INSTALLED_SWAPD, service


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
    # swapd's circusd hands SIGHUP to the daemon as a reload (tests/stack/test_hot_reload.py).
    assert svc["ExecReload"] == ["/bin/kill -HUP $MAINPID"]


def test_circusctl_endpoint_matches_the_run_dir_layout() -> None:
    from swapd.ipc.endpoints import Endpoints

    assert Endpoints(Path("/run/swapd")).circus_ctl == "ipc:///run/swapd/circus-ctl.sock"
