"""tests/support/ports.py, the one port picker of the tests and the benchmarks: every port it
hands out lies below the kernel's ephemeral range (where outgoing connections take theirs), is
free when handed out, and is never handed out twice by one process."""

from __future__ import annotations

import socket

import pytest

from tests.support import ports

EPHEMERAL_LOW = 32768


def test_ports_lie_below_the_ephemeral_range_and_are_not_handed_out_twice() -> None:
    picked = ports.free_ports(50) + [ports.free_port() for _ in range(50)]
    assert len(set(picked)) == len(picked)
    assert all(ports.PORTS[0] <= port < min(ports.PORTS[1], EPHEMERAL_LOW) for port in picked)


def test_a_range_is_consecutive_and_every_port_of_it_is_free() -> None:
    base = ports.free_port_range(8)
    for port in range(base, base + 8):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # raises if taken


def test_a_taken_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports.free_port()))
        held = taken.getsockname()[1]
        monkeypatch.setattr(ports, "_next", [held])
        assert ports.free_port() != held


def test_the_stack_helpers_are_this_picker() -> None:
    from tests.support import stack

    assert stack.free_port is ports.free_port
    assert stack.free_port_range is ports.free_port_range
