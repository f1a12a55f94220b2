"""`swapd run --watch-config`: notice that the config file changed, as llama-swap's
`-watch-config` does (it compares mtime and size every 2 s; here every half second, so that a
change is applied within 2 s). The reload itself is the daemon's, the same as `swapd reload`.

The file is compared by modification time, size and inode (an editor that saves by renaming a new
file over the old one changes the inode); a file that cannot be read counts as changed when it
can be again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

log = logging.getLogger("swapd.daemon")

POLL_INTERVAL = 0.5

Stamp = tuple[int, int, int] | None


def stamp(path: Path) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


async def watch(
    path: Path, reload: Callable[[], Awaitable[object]], interval: float = POLL_INTERVAL
) -> None:
    """Call `reload` after each change of `path` (forever; cancel to stop). `reload` logs its
    own outcome; an exception from it is logged here and the watch goes on."""
    seen = stamp(path)
    while True:
        await asyncio.sleep(interval)
        now = stamp(path)
        if now == seen or now is None:
            continue
        seen = now
        log.info("config file %s changed; reloading", path)
        try:
            await reload()
        except Exception:
            log.exception("reload after the config file changed failed")
