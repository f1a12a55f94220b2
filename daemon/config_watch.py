"""`swapd run --watch-config`: notice that the config changed, as llama-swap's `-watch-config`
does (it compares mtime and size every 2 s; here every half second, so that a change is applied
within 2 s). The reload itself is the daemon's, the same as `swapd reload`.

Each file is compared by modification time, size and inode (an editor that saves by renaming a new
file over the old one changes the inode), and with `--config-dir` the directory's list of files
too (a file added or removed is a change); a config that cannot be read counts as changed when it
can be again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .config import ConfigSources

log = logging.getLogger("swapd.daemon")

POLL_INTERVAL = 0.5


async def watch(
    sources: ConfigSources, reload: Callable[[], Awaitable[object]], interval: float = POLL_INTERVAL
) -> None:
    """Call `reload` after each change of `sources` (forever; cancel to stop). `reload` logs its
    own outcome; an exception from it is logged here and the watch goes on."""
    seen = sources.stamp()
    while True:
        await asyncio.sleep(interval)
        now = sources.stamp()
        if now == seen or now is None:
            continue
        seen = now
        log.info("config %s changed; reloading", sources)
        try:
            await reload()
        except Exception:
            log.exception("reload after the config file changed failed")
