"""Loopback ports for servers a test or a benchmark starts: one picker for both.

A port is picked when a config is written or a command line built, and bound by another process
later (a model's `startPort`, swapd's `--listen`, a stand-in upstream), maybe minutes later. The
kernel's own pick (`bind(("127.0.0.1", 0))`) lies in its ephemeral range (32768-60999 on Linux),
the same range it takes the local ports of outgoing connections from, so between the pick and
the bind a proxy's connection to some upstream can take it: "port ... is already in use by
another process". So ports come from below that range (`PORTS`), and a process hands each out
once (a pointer moving through its slice, wrapping around at the end) so that two picks of one
run never meet even before either is bound; each pytest-xdist worker has a slice of its own, and
the pointer starts at random so runs of other checkouts on the machine start elsewhere. Each
port handed out is checked free by binding it.

Benchmarks import this too (`benchmarks/harness/`), so it depends on nothing but the standard
library.
"""

from __future__ import annotations

import os
import random
import socket

# Below Linux's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default).
PORTS = (20000, 32000)
_next: list[int] = []


def _slice() -> tuple[int, int]:
    low, high = PORTS
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if not worker.startswith("gw") or count <= 1:
        return low, high
    size = (high - low) // count
    index = int(worker[2:]) % count
    return low + index * size, low + (index + 1) * size


def _bindable(base: int, count: int) -> bool:
    socks = []
    try:
        for port in range(base, base + count):
            sock = socket.socket()
            socks.append(sock)
            sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    finally:
        for sock in socks:
            sock.close()
    return True


def free_port_range(count: int) -> int:
    """The first of `count` consecutive free ports (a config's `startPort`), never handed out
    before by this process (until its slice wraps around)."""
    low, high = _slice()
    if count < 1 or count > high - low:
        raise ValueError(f"cannot hand out {count} consecutive ports from {low}-{high}")
    if not _next:
        _next.append(random.Random().randrange(low, high - count))
    for _ in range(200):
        base = _next[0]
        if base + count > high:
            base = low
        _next[0] = base + count
        if _bindable(base, count):
            return base
    raise RuntimeError(f"no {count} consecutive free ports found in {low}-{high}")


def free_port() -> int:
    """One free port from `PORTS`, never handed out before by this process."""
    return free_port_range(1)


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports (not necessarily consecutive)."""
    return [free_port() for _ in range(count)]
