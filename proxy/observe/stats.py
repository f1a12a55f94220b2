"""This proxy process's counters: how its requests were served, for operators and for tests (which
observe the pipeline through these, never through log lines). `GET /running` shows them under
`"proxy"` (docs/endpoints.md). One `Stats` per proxy, in its context (`ctx.stats`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass


@dataclass(slots=True)
class Stats:
    # Every request the proxy answered, whatever the route (bad requests included).
    requests: int = 0
    # Requests forwarded to a local model, and how many of those went out at once because the
    # model was ready (no IPC at all) or first sent `Ensure` to the daemon and waited for it.
    forwarded: int = 0
    served_without_ipc: int = 0
    waited_for_start: int = 0
    # Of those sent at once, how many found the model's port closed (its process gone before
    # the daemon's word of it arrived) and were sent again once the daemon had it back.
    refused_ready: int = 0
    # Served outside admission: ignored paths and ignored websockets of a ready model.
    outside_admission: int = 0
    # Forwarded to a peer.
    peer: int = 0
    # Websockets relayed (any upstream).
    websockets: int = 0
    # Requests refused by a route decision, the API key check or admission (4xx/5xx of swapd's own).
    refused: int = 0
    # Requests the HTTP parser rejected (malformed, over the head limits, too slow a head).
    bad_requests: int = 0
    # Connections closed because a request body stalled (`clientBodyTimeout`) or a response went
    # unread (`sendTimeout`).
    body_timeouts: int = 0
    send_timeouts: int = 0
    # Requests ended because their body came more slowly than `clientBodyMinRate`, and because
    # their client held up their model's drain past `drainClientTimeout`.
    slow_bodies: int = 0
    drain_cuts: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"pid": os.getpid(), **asdict(self)}
