"""`swapd run` itself: it becomes circusd, its run dir and sockets are private, nothing but the
proxy's port listens on the network, bad input is refused clearly, and Ctrl-C / SIGTERM stop
everything (cmdStop included) with exit code 0."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pynvml
import pytest

from swapd.daemon.cli import command as cli
from tests.support.daemon import chat, config
from tests.support.nvml import StubNvml
from tests.support.stack import PYTHON, fake_model_cmd, free_port

pytestmark = pytest.mark.processes


def test_process_tree_private_sockets_and_no_network_control(stack_factory) -> None:
    stack = stack_factory(config({"one": {"cmd": fake_model_cmd("one")}}))
    chat(stack.url, "one")
    # `swapd run` exec'd circusd: systemd's main pid is circusd itself.
    assert stack.proc is not None
    circusd = psutil.Process(stack.proc.pid)
    assert "swapd.daemon.cli.circusd" in " ".join(circusd.cmdline())
    listed = stack.circusctl("status")
    for name in ("swapd-daemon: active", "swapd-proxy: active", "model-one: active"):
        assert name in listed

    assert stat.S_IMODE(stack.run_dir.stat().st_mode) == 0o700
    sockets = [p for p in stack.run_dir.iterdir() if p.is_socket()]
    assert {p.name for p in sockets} >= {
        "daemon.sock", "events.sock", "circus-ctl.sock", "circus-pub.sock",
    }  # fmt: skip
    for path in sockets:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path

    model_pid = stack.model("one")["pid"]
    ours = [circusd, *circusd.children(recursive=True)]
    listening = set()
    for proc in ours:
        if proc.pid == model_pid:
            continue
        for conn in proc.net_connections(kind="inet"):
            assert conn.type != socket.SOCK_DGRAM, f"UDP socket in {proc.cmdline()}: {conn}"
            if conn.status == psutil.CONN_LISTEN:
                listening.add(conn.laddr.port)
    assert listening == {stack.port}


def test_invalid_config_and_busy_port_are_refused(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  a:\n    cmd: x\n    ttl: ten\n")
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [
            PYTHON,
            "-m",
            "swapd.daemon.cli",
            "run",
            "-c",
            str(bad),
            "--run-dir",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert "ttl" in result.stderr and "bad.yaml" in result.stderr
    assert not (run_dir / "circus.ini").exists()

    good = tmp_path / "good.yaml"
    good.write_text("models:\n  a:\n    cmd: x --port ${PORT}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [PYTHON, "-m", "swapd.daemon.cli", "run", "-c", str(good), "--run-dir", str(run_dir),
             "--listen", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    assert result.returncode == 1
    assert "already in use" in result.stderr


def test_ready_and_watchdog_reach_systemd(stack_factory, tmp_path) -> None:
    # A datagram socket standing for systemd's $NOTIFY_SOCKET (the unit's NotifyAccess=all).
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        systemd.bind(path)
        systemd.settimeout(20)
        stack_factory(
            config({"m": {"cmd": fake_model_cmd("m")}}),
            env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"},
        )
        received: list[str] = []
        while not {"READY=1", "WATCHDOG=1"} <= set(received):
            received.extend(systemd.recv(4096).decode().splitlines())
    assert received.index("READY=1") < received.index("WATCHDOG=1")


def test_a_second_swapd_in_the_same_run_dir_is_refused(stack_factory) -> None:
    stack = stack_factory(config({"m": {"cmd": fake_model_cmd("m")}}))
    result = subprocess.run(
        [PYTHON, "-m", "swapd.daemon.cli", "run", "-c", str(stack.config_path),
         "--run-dir", str(stack.run_dir), "--listen", f"127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "already running" in result.stderr
    assert stack.swapd("status").returncode == 0


def test_gpus_naming_no_device_are_refused_before_circusd(tmp_path) -> None:
    # The fake backend stands for NVML on a host with one GPU.
    path = tmp_path / "gpus.yaml"
    path.write_text("models:\n  a:\n    cmd: x --port ${PORT}\n    gpus: [3]\n")
    run_dir = tmp_path / "run"
    env = {**os.environ, "SWAPD_GPU_BACKEND": "fake", "SWAPD_FAKE_GPUS": "1"}
    result = subprocess.run(
        [PYTHON, "-m", "swapd.daemon.cli", "run", "-c", str(path), "--run-dir", str(run_dir),
         "--listen", f"127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=30, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 1
    assert "models.a.gpus: no GPU '3'" in result.stderr
    assert not (run_dir / "circus.ini").exists()


def test_a_broken_nvml_with_gpus_configured_fails_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # StubNvml stands for nvidia-ml-py on a host whose driver is not loaded. `swapd run` must say
    # so and exit 1 instead of exec'ing circusd, whose daemon would then exit and be restarted.
    monkeypatch.setitem(sys.modules, "pynvml", StubNvml(pynvml.NVMLError_DriverNotLoaded()))
    monkeypatch.delenv("SWAPD_GPU_BACKEND", raising=False)
    monkeypatch.setenv("SWAPD_PYTHON", sys.executable)  # `swapd run` exports it; restored after

    def no_exec(*args: object) -> None:
        raise AssertionError(f"swapd run exec'd circusd: {args}")

    monkeypatch.setattr(os, "execv", no_exec)
    path = tmp_path / "gpus.yaml"
    path.write_text("models:\n  a:\n    cmd: x --port ${PORT}\n    gpus: [0]\n")
    run_dir = tmp_path / "run"
    argv = ["run", "-c", str(path), "--run-dir", str(run_dir)]
    code = cli.main([*argv, "--listen", f"127.0.0.1:{free_port()}"])
    assert code == 1
    err = capsys.readouterr().err
    assert "models a set `gpus`, which needs a working NVML" in err
    assert not (run_dir / "circus.ini").exists()
