"""When the daemon publishes its routing table again for a proxy that says Hello.

A proxy older than this daemon followed a previous daemon, and learns that it was replaced only
from an event carrying the new `instance`; the one published at bind time is lost while its SUB
reconnects. Until it learns, it does not send again the Ensures the dead daemon never answered,
so a restarted daemon with nothing else to publish would leave them waiting for ever. Its queued
first Hello may arrive before its SUB is subscribed again, so the next heartbeats (1 s apart)
repeat it. A proxy started after this daemon takes a snapshot: nothing to repeat.
"""

from __future__ import annotations

import psutil

# How many of each proxy's first heartbeats re-announce this daemon instance.
ANNOUNCE_HELLOS = 3


class Announcer:
    def __init__(self) -> None:
        self._announced: dict[str, int] = {}

    def due(self, proxy_id: str, pid: int) -> bool:
        """Whether this Hello of `proxy_id` (process `pid`) calls for the table again."""
        count = self._announced.get(proxy_id, 0)
        if count >= ANNOUNCE_HELLOS:
            return False
        self._announced[proxy_id] = count + 1
        if count == 0 and not _older_than_me(pid):
            self._announced[proxy_id] = ANNOUNCE_HELLOS
            return False
        return True

    def forget(self, proxy_id: str) -> None:
        self._announced.pop(proxy_id, None)


def _older_than_me(pid: int) -> bool:
    """Whether process `pid` was started before this one (True when that cannot be told)."""
    try:
        return bool(psutil.Process(pid).create_time() < psutil.Process().create_time())
    except psutil.Error:
        return True
