"""The shipped unit under a real systemd: `systemctl start swapd` the way an operator runs it.

A Debian system with systemd as PID 1 runs in one container on the private docker engine
(tests/support/realparts/systemd_image.py). swapd goes in as docs/install.md says: wheels built here
(`pip wheel .`), `pip install --no-index` into /opt/swapd/venv, the config at
/etc/swapd/config.yaml, systemd/swapd.service as it ships, and the listen address moved by a drop-in
(the file `systemctl edit swapd` writes) to a free loopback port. The container shares this
machine's network (`--network host`), so the proxy answers on this machine's 127.0.0.1.

Two models:
- `boxed` stands for a docker model (`docker run --rm --name ...` with `cmdStop: docker stop ...`).
  There is no docker inside the container, so `systemd-run --pipe` runs the server as a transient
  unit: like a container under dockerd, it lives in a cgroup of its own, outside swapd.service, so
  neither circus's signals nor systemd's KillMode reach it and only its cmdStop (`systemctl stop
  UNIT`, as `docker stop NAME`) stops it. `systemd-run --pipe` is the attached client: it relays
  the server's output, and SIGTERM ends the client while the server goes on (as when the `docker
  run` client is killed).
- `plain` is swapd's demo server run directly: a child of circusd inside swapd.service's cgroup.

The tests run in file order on the one container, each leaving swapd running unless it says so.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.realparts import provision, systemd_image
from tests.support.realparts.docker_engine import DockerEngine
from tests.support.realparts.plugin import _need
from tests.support.realparts.systemd_image import SystemdContainer
from tests.support.realparts.systemd_swapd import CIRCUSCTL, SWAPD, VENV, Host, install
from tests.support.stack import free_port, free_port_range, http_get, wait_for
from tests.support.systemd_unit import service

# The root filesystem (debootstrap: about a minute and a half the first time) and swapd's wheels
# are made before any test runs (the real part `systemd`, tests/support/realparts/plugin.py); the
# first test's set-up imports the image and boots the container. The module takes 1.5 to 2.5
# minutes here.
pytestmark = [
    pytest.mark.processes,
    pytest.mark.docker,
    pytest.mark.systemd,
    pytest.mark.timeout(480),
]

BOX_UNIT = "swapd-box-boxed.service"
WATCHDOG_SEC = 5
# `logToStdout: both`, as docs/install.md recommends under systemd: models' lines reach the journal.
CONFIG = """healthCheckTimeout: 30
startPort: {base}
logToStdout: both
models:
  boxed:
    cmd: >-
      systemd-run --unit=swapd-box-${{MODEL_ID}} --pipe --quiet --collect
      {venv}/bin/python -m swapd.daemon.cli.demo_server --port ${{PORT}} --model ${{MODEL_ID}}
    cmdStop: systemctl stop swapd-box-${{MODEL_ID}}
  plain:
    cmd: {venv}/bin/python -m swapd.daemon.cli.demo_server --port ${{PORT}} --model ${{MODEL_ID}}
"""


def _cannot_run(reason: str) -> None:
    if provision.mode() == "require":
        pytest.fail(f"real systemd part cannot run (CI requires it): {reason}", pytrace=False)
    pytest.skip(f"real systemd part not available: {reason}")


@pytest.fixture(scope="module")
def host(docker_engine: DockerEngine) -> Iterator[Host]:
    tools: systemd_image.SystemdTools = _need("systemd")
    box: SystemdContainer | None = None
    try:
        wheels = tools.wheels
        if wheels is None:
            raise provision.PartMissing(tools.rootfs_missing)
        box = SystemdContainer(docker_engine, systemd_image.ensure_image(docker_engine, tools))
        box.start()
    except provision.PartMissing as exc:
        if box is not None:
            box.remove()
        _cannot_run(str(exc))
    assert box is not None
    try:
        port = free_port()
        config = CONFIG.format(base=free_port_range(2), venv=VENV)
        yield install(box, wheels, config, port)
    finally:
        box.remove()


def test_systemd_analyze_verify_accepts_the_installed_unit(host: Host) -> None:
    # Inside, the unit's own paths exist: verify checks it as installed, with its drop-in.
    done = host.box.exec(
        "systemd-analyze", "verify", "/etc/systemd/system/swapd.service", check=False
    )
    assert done.returncode == 0, done.stderr
    assert "swapd.service" not in done.stderr, done.stderr


def test_start_returns_only_once_the_proxy_answers(host: Host) -> None:
    assert host.unit("ActiveState")["ActiveState"] == "inactive"
    host.box.exec("systemctl", "start", "swapd", timeout=90)
    # One request, no retry: Type=notify holds `systemctl start` until the daemon's READY=1,
    # which it sends once the proxy listens.
    status, body = http_get(f"http://127.0.0.1:{host.port}/v1/models", timeout=2)
    assert status == 200, body
    assert {m["id"] for m in json.loads(body)["data"]} == {"boxed", "plain"}
    # The unit became active at READY=1, after circusd, the daemon and a proxy started, not at
    # exec (with Type=simple the two moments are the same).
    times = host.unit("ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic")
    began, active = (int(times[k]) for k in times)
    assert active > began, times
    props = host.unit("ActiveState", "SubState", "Type", "NRestarts")
    assert props == {"ActiveState": "active", "SubState": "running", "Type": "notify",
                     "NRestarts": "0"}  # fmt: skip


def test_systemctl_status_shows_the_status_line(host: Host) -> None:
    host.serving()
    expected = f"swapd: serving on 127.0.0.1:{host.port}"
    assert host.unit("StatusText")["StatusText"] == expected
    shown = host.box.exec("systemctl", "status", "--no-pager", "swapd").stdout
    assert f'Status: "{expected}"' in shown, shown


def test_a_request_swaps_between_the_two_models(host: Host) -> None:
    host.serving()
    reply = host.chat("boxed")
    assert reply["model"] == "boxed"
    assert "Hello from boxed" in reply["choices"][0]["message"]["content"]
    boxed = host.unit("ActiveState", "ControlGroup", unit=BOX_UNIT)
    assert boxed["ActiveState"] == "active"
    # Like a docker container, the server is not in swapd's cgroup.
    assert "swapd.service" not in boxed["ControlGroup"], boxed

    reply = host.chat("plain")
    assert "Hello from plain" in reply["choices"][0]["message"]["content"]
    # Only cmdStop (`systemctl stop`) can have stopped a server outside swapd's cgroup.
    assert host.unit("ActiveState", unit=BOX_UNIT)["ActiveState"] in ("inactive", "failed")
    assert host.model("boxed")["state"] == "stopped"
    plain = host.model("plain")
    assert plain["state"] == "ready"
    assert plain["pid"] in host.unit_pids()

    assert "Hello from boxed" in host.chat("boxed")["choices"][0]["message"]["content"]
    assert host.model("plain")["state"] == "stopped"
    assert host.unit("ActiveState", unit=BOX_UNIT)["ActiveState"] == "active"


def _unit_environment(host: Host) -> dict[str, str]:
    line = host.unit("Environment")["Environment"]
    return dict(item.split("=", 1) for item in shlex.split(line))


def test_swapd_status_and_circusctl_work_with_the_units_environment(host: Host) -> None:
    host.serving("boxed")
    env = _unit_environment(host)
    assert env["CIRCUSCTL_ENDPOINT"] == "ipc:///run/swapd/circus-ctl.sock"
    table = host.box.exec(SWAPD, "status", env=env).stdout
    rows = {line.split()[0]: line.split()[1] for line in table.splitlines()[2:] if line.strip()}
    assert rows.get("boxed") == "ready" and rows.get("plain") == "stopped", table

    circus = host.box.exec(CIRCUSCTL, "status", env=env).stdout
    states = dict(line.split(": ", 1) for line in circus.splitlines() if ": " in line)
    assert states == {"model-boxed": "active", "swapd-daemon": "active", "swapd-proxy": "active"}
    # Without the unit's environment circusctl looks for circus's default TCP endpoint, where
    # nothing listens: the environment is what makes it work.
    bare = host.box.exec(CIRCUSCTL, "--timeout", "2", "status", check=False)
    assert bare.returncode != 0


def test_run_dir_and_sockets_have_the_units_modes(host: Host) -> None:
    host.serving("plain")
    script = "stat -c '%a %U %F %n' /run/swapd /run/swapd/* /run/swapd/logs/*"
    entries = [line.split(" ") for line in host.box.sh(script).stdout.splitlines()]
    by_path = {parts[-1]: (int(parts[0], 8), parts[1], " ".join(parts[2:-1])) for parts in entries}
    assert by_path["/run/swapd"] == (0o700, "root", "directory")
    assert by_path["/run/swapd/logs"] == (0o700, "root", "directory")
    sockets = {p: v for p, v in by_path.items() if v[2] == "socket"}
    assert {Path(p).name for p in sockets} >= {"circus-ctl.sock", "daemon.sock"}
    for path, (mode, owner, kind) in by_path.items():
        assert owner == "root", path
        assert mode & 0o077 == 0, f"{path} ({kind}) has mode {mode:o}"


def test_a_daemon_killed_with_sigkill_is_restarted_by_circus_with_the_models_kept(
    host: Host,
) -> None:
    host.serving("boxed")
    before = host.status()
    boxed = host.model("boxed")
    assert boxed["state"] == "ready"
    unit_before = host.unit("MainPID", "NRestarts")
    server_before = host.unit("MainPID", unit=BOX_UNIT)["MainPID"]

    host.box.exec("kill", "-KILL", str(before["pid"]))

    def new_daemon() -> dict[str, Any] | None:
        status = host.status()
        return status if status["pid"] != before["pid"] else None

    after = wait_for(new_daemon, timeout=30, interval=0.2, what="a new daemon")
    kept = next(m for m in after["models"] if m["model"] == "boxed")
    assert (kept["state"], kept["pid"]) == ("ready", boxed["pid"])
    # circusd (systemd's main pid) was not restarted, nor was the unit, nor the server.
    assert host.unit("MainPID", "NRestarts") == unit_before
    assert host.unit("MainPID", unit=BOX_UNIT)["MainPID"] == server_before
    assert "Hello from boxed" in host.chat("boxed")["choices"][0]["message"]["content"]


def test_a_killed_client_leaves_no_server_behind_cmdstop_stops_it(host: Host) -> None:
    # `docker run` killed (the OOM killer, an operator) leaves its container running; so does
    # `systemd-run --pipe` its unit. The daemon notices the exit and runs the model's cmdStop.
    host.serving("boxed")
    client = host.model("boxed")["pid"]
    server = host.unit("MainPID", unit=BOX_UNIT)["MainPID"]
    host.box.exec("kill", "-KILL", str(client))
    wait_for(lambda: host.model("boxed")["state"] == "stopped", timeout=30, what="boxed stopped")
    wait_for(
        lambda: host.unit("ActiveState", unit=BOX_UNIT)["ActiveState"] in ("inactive", "failed"),
        timeout=30,
        what="cmdStop to stop the server the killed client left",
    )
    assert "Hello from boxed" in host.chat("boxed")["choices"][0]["message"]["content"]
    assert host.unit("MainPID", unit=BOX_UNIT)["MainPID"] not in ("0", server)


def _freeze_the_daemon_until_systemd_restarts_swapd(host: Host) -> set[int]:
    """SIGSTOP the daemon; wait for the watchdog's restart. Returns the unit's processes before."""
    before = host.unit("MainPID", "NRestarts", "InvocationID")
    pids = host.unit_pids()
    host.box.exec("kill", "-STOP", str(host.status()["pid"]))
    again = {"ActiveState": "active", "NRestarts": str(int(before["NRestarts"]) + 1)}
    wait_for(
        lambda: host.unit("ActiveState", "NRestarts") == again,
        timeout=60,
        interval=0.2,
        what="systemd's watchdog restart",
    )
    after = host.unit("MainPID", "InvocationID")
    assert after["MainPID"] != before["MainPID"]
    assert after["InvocationID"] != before["InvocationID"]
    return pids


def test_a_frozen_daemon_is_restarted_by_systemds_watchdog(host: Host) -> None:
    host.set_dropin("watchdog.conf", f"[Service]\nWatchdogSec={WATCHDOG_SEC}\n")
    try:
        host.box.exec("systemctl", "restart", "swapd", timeout=120)
        assert host.unit("WatchdogUSec")["WatchdogUSec"] == f"{WATCHDOG_SEC}s"

        # A model inside swapd's cgroup dies with it; its log of that run stays for a look.
        host.chat("plain")
        plain_pid = host.model("plain")["pid"]
        log = "/run/swapd/logs/model-plain.log"
        logged = host.box.exec("cat", log).stdout
        assert "demo model plain listening" in logged
        pids = _freeze_the_daemon_until_systemd_restarts_swapd(host)
        assert plain_pid in pids
        assert host.alive(pids) == set()  # frozen daemon, circusd, proxy and the model: SIGKILLed
        timeouts = [
            e for e in host.journal()
            if e.get("_PID") == "1" and "Watchdog timeout" in str(e.get("MESSAGE", ""))
        ]  # fmt: skip
        assert timeouts, "systemd logged no watchdog timeout for swapd.service"
        assert host.model("plain")["state"] == "stopped"
        assert host.box.exec("cat", log).stdout.startswith(logged)
        assert "Hello from plain" in host.chat("plain")["choices"][0]["message"]["content"]

        # A model outside it (a docker container) outlives the restart, and swapd no longer
        # knows it: its port is taken until the operator stops it (`docker stop NAME`).
        host.chat("boxed")
        server = host.unit("MainPID", unit=BOX_UNIT)["MainPID"]
        port = host.model("boxed")["port"]
        _freeze_the_daemon_until_systemd_restarts_swapd(host)
        assert host.unit("ActiveState", "MainPID", unit=BOX_UNIT) == {
            "ActiveState": "active",
            "MainPID": server,
        }
        assert host.model("boxed")["state"] == "stopped"
        with pytest.raises(AssertionError, match=f"HTTP 502: .*port {port}"):
            host.chat("boxed")
        host.box.exec("systemctl", "stop", BOX_UNIT)
        assert "Hello from boxed" in host.chat("boxed")["choices"][0]["message"]["content"]
    finally:
        host.set_dropin("watchdog.conf", None)
        host.box.exec("systemctl", "stop", BOX_UNIT, check=False)
        host.box.exec("systemctl", "restart", "swapd", timeout=120)
    assert host.unit("WatchdogUSec")["WatchdogUSec"] == "30s"


def test_systemctl_stop_stops_every_model_within_timeout_stop_sec(host: Host) -> None:
    host.serving("boxed")
    assert host.unit("ActiveState", unit=BOX_UNIT)["ActiveState"] == "active"
    pids = host.unit_pids()
    assert len(pids) >= 4  # circusd, daemon, proxy, the boxed model's client
    limit = float(service()["TimeoutStopSec"][-1])

    host.box.exec("systemctl", "stop", "swapd", timeout=limit + 30)
    # "success": circusd exited 0 by itself within TimeoutStopSec; "timeout" would mean systemd
    # had to SIGKILL it.
    assert host.unit("ActiveState", "Result") == {"ActiveState": "inactive", "Result": "success"}
    assert host.unit_pids() == set()
    assert host.alive(pids) == set()
    # The server outside the cgroup is stopped too: its cmdStop ran.
    assert host.unit("ActiveState", unit=BOX_UNIT)["ActiveState"] in ("inactive", "failed")
    assert host.box.exec("test", "-e", "/run/swapd", check=False).returncode == 1


def test_the_journal_has_swapds_lines_and_each_model_log_its_output(host: Host) -> None:
    host.serving()
    pids = {}
    for model_id in ("plain", "boxed"):
        host.chat(model_id)
        pids[model_id] = host.model(model_id)["pid"]
    entries = [e for e in host.journal() if e.get("SYSLOG_IDENTIFIER") == "swapd"]
    messages = [str(e.get("MESSAGE", "")) for e in entries]
    daemon = [m for m in messages if " swapd-daemon[" in m]
    for model_id, pid in pids.items():
        assert any(f"{model_id} ready (pid {pid}, " in m for m in daemon), model_id
    assert any("boxed: running cmdStop systemctl stop swapd-box-boxed" in m for m in daemon)
    assert any("circus[" in m and "model-plain started" in m for m in messages)
    assert any(" swapd-proxy[" in m for m in messages)
    # A model's own output goes to its log file and, with `logToStdout: both`, through circusd's
    # stdout to the journal as `[model-id] line`; `systemd-run --pipe` relays the boxed one's.
    for model_id in pids:
        log = host.box.exec("cat", f"/run/swapd/logs/model-{model_id}.log").stdout
        port = host.model(model_id)["port"]
        said = f"demo model {model_id} listening on http://127.0.0.1:{port}"
        assert said in log
        wait_for(
            lambda model_id=model_id, said=said: (
                f"[{model_id}] {said}" in [str(e.get("MESSAGE", "")) for e in host.journal()]
            ),
            timeout=15,
            interval=0.5,
            what=f"[{model_id}] {said} in journalctl -u swapd",
        )
