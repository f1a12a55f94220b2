"""`swapd run --watch-config`: notice that the config changed, as llama-swap's `-watch-config`
does (it compares mtime and size every 2 s; here every quarter second), and reload once the
file has settled: once it has looked the same for `QUIET_S` (`SWAPD_WATCH_QUIET`). A file saved
in place in two steps (truncated and written, or written in two parts) is briefly a valid config
that lacks half its models; reloading it then would stop them and answer their requests 404
until the second step (issue 29, finding 8). Saving by rename (write a new file, rename it over
the old one) is what makes a save one step; the quiet period covers editors and tools that do
not. The reload itself is the daemon's, the same as `swapd reload`.

Each file is compared by modification time, size and inode (an editor that saves by renaming a new
file over the old one changes the inode), and with `--config-dir` the directory's list of files
too (a file added or removed is a change); a config that cannot be read counts as changed when it
can be again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable

from .config import ConfigSources
from .errors import DaemonError

log = logging.getLogger("swapd.daemon")

POLL_INTERVAL = 0.25
QUIET_ENV = "SWAPD_WATCH_QUIET"
QUIET_S = 1.0


def quiet_period() -> float:
    """`SWAPD_WATCH_QUIET` seconds (default 1), or the default when it is no number >= 0."""
    raw = os.environ.get(QUIET_ENV, "")
    try:
        value = float(raw) if raw else QUIET_S
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        log.warning("%s=%r is not a number of seconds >= 0; using %g", QUIET_ENV, raw, QUIET_S)
        return QUIET_S
    return value


async def watch(
    sources: ConfigSources,
    reload: Callable[[], Awaitable[object]],
    interval: float = POLL_INTERVAL,
    quiet: float | None = None,
) -> None:
    """Call `reload` once `sources` changed and then stayed the same for `quiet` seconds (forever;
    cancel to stop). `reload` logs its own outcome: a refused file is one line there, and its
    `DaemonError` ends here; anything else it raises is logged here, and the watch goes on."""
    if quiet is None:
        quiet = quiet_period()
    loop = asyncio.get_running_loop()
    applied = seen = sources.stamp()
    seen_since = loop.time()
    while True:
        await asyncio.sleep(interval)
        now = sources.stamp()
        if now != seen:
            seen, seen_since = now, loop.time()  # still changing: wait for it to settle
            continue
        if now == applied or now is None or loop.time() - seen_since < quiet:
            continue
        applied = now
        log.info("config %s changed; reloading", sources)
        try:
            await reload()
        except DaemonError:
            pass  # refused: the reload logged why, on one line
        except Exception:
            log.exception("reload after the config file changed failed")
