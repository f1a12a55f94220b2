"""sd_notify (daemon/notify.py) against a real AF_UNIX datagram socket standing in for systemd's."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from swapd.daemon.machinery import notify


@pytest.fixture
def systemd_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, dict[str, str]]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify.sock"
    sock.bind(str(path))
    sock.settimeout(5)
    yield sock, {"NOTIFY_SOCKET": str(path)}
    sock.close()


def test_ready_watchdog_status_stopping(
    systemd_socket: tuple[socket.socket, dict[str, str]],
) -> None:
    sock, env = systemd_socket
    assert notify.ready(environ=env)
    assert sock.recv(4096) == b"READY=1"
    assert notify.watchdog(environ=env)
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert notify.status("serving 2 models\nand more", environ=env)
    assert sock.recv(4096) == b"STATUS=serving 2 models and more"
    assert notify.stopping(environ=env)
    assert sock.recv(4096) == b"STOPPING=1"


def test_abstract_socket() -> None:
    name = f"swapd-test-notify-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        sock.settimeout(5)
        assert notify.ready(environ={"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(4096) == b"READY=1"


def test_no_socket_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify.ready() is False
    assert notify.watchdog(environ={"NOTIFY_SOCKET": ""}) is False


def test_socket_gone_is_not_an_error(tmp_path: Path) -> None:
    assert notify.ready(environ={"NOTIFY_SOCKET": str(tmp_path / "missing.sock")}) is False


@pytest.mark.parametrize(
    ("value", "interval"),
    [("30000000", 15.0), ("1000", 0.0005), ("0", None), ("soon", None), (None, None)],
)
def test_watchdog_interval(value: str | None, interval: float | None) -> None:
    env = {} if value is None else {"WATCHDOG_USEC": value}
    assert notify.watchdog_interval(environ=env) == interval
