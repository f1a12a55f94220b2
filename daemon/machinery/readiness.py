"""What the daemon tells systemd: `READY=1` once a proxy said hello (circusd bound the listen
socket before any proxy ran, so a TCP probe would succeed too early), then `WATCHDOG=1` every half
`WatchdogSec`, and only while circusd answers."""

from __future__ import annotations

import asyncio
import logging
import os

from ..errors import CircusError, CircusUnavailable
from . import notify
from .circus_client import CircusClient

log = logging.getLogger("swapd.daemon")

WATCHDOG_DEFAULT = 10.0


async def serve(first_hello: asyncio.Event, circus: CircusClient) -> None:
    await first_hello.wait()
    notify.ready()
    notify.status(f"swapd: serving on {os.environ.get('SWAPD_LISTEN', '?')}")
    interval = notify.watchdog_interval()
    while True:
        await asyncio.sleep(interval or WATCHDOG_DEFAULT)
        try:
            await circus.call("status", timeout=5.0)
        except (CircusUnavailable, CircusError) as exc:
            log.error("circusd does not answer (%s): withholding WATCHDOG=1", exc)
            continue
        if interval:
            notify.watchdog()
