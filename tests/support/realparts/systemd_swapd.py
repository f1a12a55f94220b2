"""swapd installed in the systemd container (tests/support/realparts/systemd_image.py) as
docs/install.md says, and `Host`, the tests' view of it: HTTP to its proxy on this machine's
loopback (the container shares the network), `swapd status`, `systemctl show`, the unit's cgroup,
the journal and drop-ins."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.realparts.systemd_image import SystemdContainer
from tests.support.stack import REPO

UNIT_FILE = REPO / "systemd" / "swapd.service"
VENV = "/opt/swapd/venv"
SWAPD = f"{VENV}/bin/swapd"
CIRCUSCTL = f"{VENV}/bin/circusctl"
DROPIN_DIR = "/etc/systemd/system/swapd.service.d"
# What `systemctl edit swapd` writes for a new listen address (docs/install.md).
LISTEN_DROPIN = """[Service]
ExecStart=
ExecStart={swapd} run -c /etc/swapd/config.yaml --run-dir /run/swapd --listen 127.0.0.1:{port}
"""


@dataclass
class Host:
    """The container with swapd installed; `port` is the proxy's, on this machine's 127.0.0.1."""

    box: SystemdContainer
    port: int

    def chat(self, model: str) -> dict[str, Any]:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                reply: dict[str, Any] = json.load(response)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{model}: HTTP {exc.code}: {exc.read()[:2000]!r}") from None
        return reply

    def serving(self, *load: str) -> None:
        """swapd started (a no-op when it runs) and `load` loaded, so a test also runs alone."""
        self.box.exec("systemctl", "start", "swapd", timeout=90)
        for model_id in load:
            self.chat(model_id)

    def status(self) -> dict[str, Any]:
        """`swapd status --json`, as root finds it (the default run dir /run/swapd)."""
        result: dict[str, Any] = json.loads(self.box.exec(SWAPD, "status", "--json").stdout)
        return result

    def model(self, model_id: str) -> dict[str, Any]:
        return next(m for m in self.status()["models"] if m["model"] == model_id)

    def unit(self, *properties: str, unit: str = "swapd.service") -> dict[str, str]:
        return self.box.show(unit, *properties)

    def unit_pids(self) -> set[int]:
        """Every process in swapd.service's cgroup (read from /proc: cgroup v1 or v2 alike)."""
        script = (
            "for f in /proc/[0-9]*/cgroup; do grep -qs /system.slice/swapd.service $f && "
            "p=${f#/proc/} && echo ${p%/cgroup}; done; true"
        )
        return {int(pid) for pid in self.box.sh(script).stdout.split()}

    def alive(self, pids: set[int]) -> set[int]:
        if not pids:
            return set()
        script = " ".join(f"[ -d /proc/{pid} ] && echo {pid};" for pid in sorted(pids)) + " true"
        return {int(pid) for pid in self.box.sh(script).stdout.split()}

    def journal(self, unit: str = "swapd.service") -> list[dict[str, Any]]:
        out = self.box.exec("journalctl", "--unit", unit, "--output=json", "--no-pager").stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def set_dropin(self, name: str, text: str | None) -> None:
        path = f"{DROPIN_DIR}/{name}"
        if text is None:
            self.box.exec("rm", "-f", path)
        else:
            self.box.write(path, text)
        self.box.exec("systemctl", "daemon-reload")


def install(box: SystemdContainer, wheels: Path, config: str, port: int) -> Host:
    """docs/install.md, step by step, offline (wheels and `pip install --no-index`)."""
    box.copy_in(wheels, "/tmp/swapd-wheels")
    box.exec("python3", "-m", "venv", VENV)
    box.exec(
        f"{VENV}/bin/pip", "install", "-q", "--no-index", "--find-links", "/tmp/swapd-wheels",
        "swapd", timeout=300,
    )  # fmt: skip
    box.exec("install", "-d", "-m", "0755", "/etc/swapd")
    box.write("/etc/swapd/config.yaml", config)
    box.exec(SWAPD, "check-config", "-c", "/etc/swapd/config.yaml")
    box.copy_in(UNIT_FILE, "/etc/systemd/system/swapd.service")
    box.write(f"{DROPIN_DIR}/override.conf", LISTEN_DROPIN.format(swapd=SWAPD, port=port))
    box.exec("systemctl", "daemon-reload")
    return Host(box, port)
