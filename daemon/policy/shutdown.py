"""The shutdown policy: when the daemon gets SIGTERM, is swapd stopping, or only the daemon?

circusd stops every watcher at once when swapd stops; `circusctl restart swapd-daemon` (or a
daemon that circusd restarts after a crash) stops the daemon alone. Which one it is shows in
circusd's watcher statuses: only when swapd stops are the proxy and the model watchers no longer
`active`.

* swapd stops: answer every waiting and new ensure with 503 (stop admitting), let the requests in
  flight finish for up to the shutdown grace (drain), then stop every model (cmdStop where set)
  and abort the starts under way.
* the daemon stops alone: leave every model running (starting ones too) for the next daemon to
  adopt, and leave the waiting ensures unanswered: the proxies send them again to the next
  daemon, which serves them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

# How long swapd lets the requests in flight finish before it stops the models (`swapd run
# --shutdown-grace`, passed to the proxy and the daemon alike).
DEFAULT_GRACE = 30.0


def everything_stops(
    statuses: Mapping[str, str] | None,
    proxy_watcher: str,
    loaded: Collection[str],
    starting: Collection[str],
) -> bool:
    """Whether swapd as a whole is stopping, from circusd's watcher statuses (None: circusd did
    not answer, which it does not while it stops everything). `loaded` and `starting` are the
    watcher names of the models with a process and of those being started."""
    if not statuses:
        return True
    if statuses.get(proxy_watcher) not in ("active", None):
        return True
    if any(statuses.get(name) != "active" for name in loaded):
        return True
    # A start's watcher may not be added yet (None): that says nothing either way.
    return any(statuses.get(name) not in ("active", None) for name in starting)
