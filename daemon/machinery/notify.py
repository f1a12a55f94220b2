"""systemd's sd_notify protocol, without a dependency.

A datagram of `KEY=value` lines to the AF_UNIX socket named by $NOTIFY_SOCKET (a leading `@` means
Linux's abstract namespace). When $NOTIFY_SOCKET is unset (not under systemd, or a unit that is not
Type=notify) every call is a no-op and returns False. The daemon is not circusd (systemd's main
pid), so the unit needs NotifyAccess=all for these messages to count.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

SOCKET_ENV = "NOTIFY_SOCKET"
WATCHDOG_ENV = "WATCHDOG_USEC"


def _address(environ: Mapping[str, str]) -> str | bytes | None:
    path = environ.get(SOCKET_ENV)
    if not path:
        return None
    if path.startswith("@"):
        return b"\0" + path[1:].encode()
    return path


def notify(message: str, *, environ: Mapping[str, str] | None = None) -> bool:
    """Send one notification; True when it was sent, False when there is nowhere to send it.

    Errors (socket gone, systemd restarting) are swallowed: a missed notification must never take
    the daemon down; systemd's watchdog is what notices a daemon that stopped notifying.
    """
    address = _address(os.environ if environ is None else environ)
    if address is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError:
        return False
    return True


def ready(*, environ: Mapping[str, str] | None = None) -> bool:
    return notify("READY=1", environ=environ)


def stopping(*, environ: Mapping[str, str] | None = None) -> bool:
    return notify("STOPPING=1", environ=environ)


def watchdog(*, environ: Mapping[str, str] | None = None) -> bool:
    return notify("WATCHDOG=1", environ=environ)


def status(text: str, *, environ: Mapping[str, str] | None = None) -> bool:
    # STATUS is one line; a newline would start a new (bogus) assignment.
    return notify("STATUS=" + " ".join(text.splitlines()), environ=environ)


def watchdog_interval(*, environ: Mapping[str, str] | None = None) -> float | None:
    """How often to send WATCHDOG=1, in seconds (half of WatchdogSec), or None when not asked.

    systemd sets WATCHDOG_USEC (and WATCHDOG_PID for the main pid only; the daemon is not the main
    pid, so WATCHDOG_PID is not checked).
    """
    env = os.environ if environ is None else environ
    try:
        usec = int(env.get(WATCHDOG_ENV, ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    return usec / 1e6 / 2
