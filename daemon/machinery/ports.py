"""A model's port after it stopped: is it free again, and if not, who holds it.

A stopped model must give back its port. A `docker run` without `cmdStop` is the usual case that
does not: swapd stops the `docker run` client, and the container keeps listening. The daemon
checks the port after every stop and reports what lingers (`Lingering`), and the next start of
that model waits a bounded time for the port before it fails with that cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from urllib.parse import urlsplit

import psutil

from ...ipc.model_status import Lingering

# After a stop, the port must be free within this (the process is gone by then: this only covers
# a kernel that has not closed its sockets yet, and what outlives it).
RELEASE_TIMEOUT = 3.0
# A start of a model whose port lingers waits this long for it, then fails.
START_WAIT = 10.0
POLL = 0.02

_LOOPBACK_NAMES = ("localhost", "ip6-localhost", "::1")


def model_port(port: int | None, upstream: str) -> int | None:
    """The port a model serves on: its `${PORT}`, else its `proxy` URL's port when that URL is
    on loopback (a remote upstream's port says nothing about this host)."""
    if port is not None:
        return port
    try:
        parts = urlsplit(upstream)
        host = parts.hostname or ""
        explicit = parts.port
    except ValueError:
        return None
    if host not in _LOOPBACK_NAMES and not host.startswith("127."):
        return None
    return explicit or (443 if parts.scheme == "https" else 80)


def listening(port: int) -> bool:
    """Whether something listens on `port` on loopback (IPv4 or IPv6, or a wildcard address)."""
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        with probe:
            # Sockets in TIME_WAIT do not count: only a listener makes the bind fail.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


async def wait_free(port: int, timeout: float, poll: float = POLL) -> bool:
    """True once nothing listens on `port`; False when something still does after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while listening(port):
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(poll, remaining))
    return True


def owner(port: int) -> tuple[int | None, str | None]:
    """The pid and command line of the process listening on `port`, where the system shows them
    (a process of another user, or a container's port forwarder run as root, may hide its pid)."""
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
                continue
            if conn.pid is None:
                return None, None
            try:
                command = " ".join(psutil.Process(conn.pid).cmdline()) or None
            except psutil.Error:
                command = None
            return conn.pid, command
    return None, None


def _held_by(pid: int | None, command: str | None) -> str:
    if pid is None:
        return "a process this user cannot see"
    return f"pid {pid}" + (f" ({command})" if command else "")


async def report(model_id: str, port: int) -> Lingering:
    """What holds `port` after `model_id` stopped, with the hint to set cmdStop."""
    pid, command = await asyncio.to_thread(owner, port)
    message = (
        f"{model_id} stopped but port {port} is still in use by {_held_by(pid, command)}: what "
        f"its cmd started outlived it; set cmdStop to stop it (for docker: `docker stop NAME`)"
    )
    return Lingering(port=port, pid=pid, command=command, message=message)


def start_refused(model_id: str, lingering: Lingering, waited: float) -> str:
    """The message of a start that waited `waited` seconds for a lingering port in vain."""
    return (
        f"model {model_id} cannot start: port {lingering.port} is still in use by "
        f"{_held_by(lingering.pid, lingering.command)} {waited:g}s after its last stop; set "
        f"cmdStop so that stopping {model_id} stops what its cmd started"
    )
