"""`GET /api/events`: llama-swap's server-sent event stream.

Each frame is `event:message\\ndata:{"type": T, "data": "<JSON text>"}\\n\\n`, T one of
`modelStatus` (every model's state, on any change), `logData` (`{"source": "proxy"|"upstream",
"data"}`), `activity` (llama-swap's `{"id"}` of a new activity record, whose fields the activity
API gives), `inflight` (`{"operation": "snapshot", "requests"}`, then `upsert` with `request` or
`remove` with `id`), `swap` (swapd's own: a swap record as `GET /api/swaps` lists them, once its
episode ended), `uiConfig` (the config's `ui`: `{"activity": {"session_id": [...]}}`) and
`profileChanged` (`{"active"}`: again whenever the daemon's table comes with another active
profile, before its `modelStatus`, as llama-swap sends them). A new subscriber first gets the log
histories, `modelStatus`, `uiConfig`, `profileChanged` and the in-flight snapshot.

`modelStatus` is llama-swap's shape with its states (`llama_view.py`: `failed` reads `stopped`,
`draining` reads `stopping`), swapd's own state beside each as `swapd_state`.

Activity and in-flight events come from the daemon (`ActivityAdded`, `InFlightChanged`), so they
cover every proxy process; `logData` with source `proxy` is this process's own log.

Every event is encoded once (`inflight` ones by the daemon; a batch of `activity` ids, in one
piece, by each proxy that has subscribers; `logData` from the one log follower, in pieces of at
most `backlog.PIECE_BYTES` of text), and the same bytes are offered to each subscriber's backlog,
bounded in bytes (`backlog.CLIENT_BUFFER_BYTES`); what all of them cost together is bounded too
(`backlog.FANOUT_BYTES_S`). A subscriber whose backlog has no room (or all of them, past the
fan-out budget) loses the events; where it lost them it gets an `eventsDropped` event
`{"count": N, "bytes": B}` saying how many, then (when an event that carries state was among
them) a fresh `modelStatus` and in-flight `snapshot`, so its view of the models and of the
requests under way is whole again (the log lines and activity ids lost are not sent again). A
publisher never waits for a subscriber, so a slow one never slows a request, and a stalled one
holds at most its backlog.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web

from ...ipc.activity import InFlight, flight_json
from ...ipc.event_frames import activity_frames, frame
from ...ipc.messages import (
    ActivityAdded,
    CancelRequested,
    Event,
    InFlightChanged,
    SnapshotReply,
    StateChanged,
    SwapRecorded,
    TableChanged,
)
from ...ipc.states import ModelState
from ..mirror.changes import Applied
from ..mirror.state import ModelRuntime, ProxyState
from .backlog import CLIENT_BUFFER_BYTES, FANOUT_BYTES_S, Backlog, Budget, Gap, pieces
from .llama_view import model_item


class Subscriber(Backlog):
    """One `/api/events` client: its backlog of frames (an `activity` batch counts as its
    events); `stale` once it lost an event that carries state (not a log's)."""

    __slots__ = ("stale",)

    def __init__(self, limit: int = CLIENT_BUFFER_BYTES) -> None:
        super().__init__(limit)
        self.stale = False

    async def next_frames(self, hub: EventHub) -> list[bytes]:
        """The frames waiting; where some were lost, the notice, and the resync when what was
        lost carried state."""
        out: list[bytes] = []
        for item in await self.next_batch():
            if isinstance(item, Gap):
                out.append(frame("eventsDropped", {"count": item.items, "bytes": item.size}))
                if self.stale:
                    self.stale = False
                    out += hub.resync_frames()
            else:
                out.append(item)
        return out


class LogEvents:
    """A log's sink (`log_hub.TextRing.subscribe`): its chunks as `logData` events, each encoded
    once for every subscriber, in pieces of bounded size."""

    def __init__(self, hub: EventHub, source: str) -> None:
        self.hub = hub
        self.source = source

    def put_nowait(self, data: bytes) -> None:
        hub = self.hub
        subscribers = hub.subscribers
        if not subscribers:
            return
        for piece in pieces(data):
            # The budget first: a piece lost for everyone is not encoded at all.
            if not hub.fanout.take(len(piece) * len(subscribers)):
                hub.lose_everywhere(len(piece), 1, log=True)
                continue
            text = piece.decode("utf-8", "replace")
            hub.offer_all(frame("logData", {"source": self.source, "data": text}), 1, log=True)


class EventHub:
    """Told of every message the mirror applies (snapshots and the daemon's events: a listener
    of `state.changes`); fans out to subscribers."""

    def __init__(
        self,
        state: ProxyState,
        *,
        on_cancel: Callable[[str], object] = lambda _id: None,
        on_watchers: Callable[[], object] = lambda: None,
    ) -> None:
        self.state = state
        self.subscribers: set[Subscriber] = set()
        self.in_flight: dict[str, InFlight] = {}
        # Told of `CancelRequested` (the recorder ends the request if it is this process's).
        self.on_cancel = on_cancel
        # `/api/events` clients connected (from before their snapshot is sent), and who is told
        # when that goes from none to some or back (the daemon, which announces new activity and
        # renders in-flight frames only while some proxy has a client).
        self.watchers = 0
        self.on_watchers = on_watchers
        # How many events were offered, and lost to full backlogs (tests and operators).
        self.offered = 0
        self.lost = 0
        self.lost_bytes = 0
        self.fanout = Budget(FANOUT_BYTES_S)  # what the log events may cost, all subscribers
        # Moves with every change of what a resync sends (`resync_frames`).
        self.epoch = 0
        self._resync: tuple[int, list[bytes]] | None = None
        # The two logs' events (subscribed to the proxy's log and the models' by `app.py`).
        self.proxy_log = LogEvents(self, "proxy")
        self.upstream_log = LogEvents(self, "upstream")
        # The active profile last announced (a table change says whether it changed).
        self.active_profile = state.routes.table.active_profile
        self.session_headers = state.routes.table.session_headers  # the `uiConfig` last sent
        state.changes.listen(self._applied)

    def _applied(self, applied: Applied[ModelRuntime]) -> None:
        self.epoch += 1
        message = applied.message
        if isinstance(message, SnapshotReply):
            self.snapshot(message)
        else:
            self.event(message)

    @contextlib.contextmanager
    def watched(self) -> Iterator[None]:
        """One `/api/events` client, for as long as it is connected."""
        self.watchers += 1
        if self.watchers == 1:
            self.on_watchers()
        try:
            yield
        finally:
            self.watchers -= 1
            if self.watchers == 0:
                self.on_watchers()

    def counters(self) -> dict[str, int]:
        return {
            "subscribers": len(self.subscribers),
            "offered": self.offered,
            "lost": self.lost,
            "lost_bytes": self.lost_bytes,
            "buffered_bytes": sum(sub.size for sub in self.subscribers),
        }

    def broadcast(self, data: bytes, count: int = 1, *, log: bool = False) -> None:
        """Offer `data` (`count` events) to every subscriber. What the events cost the proxy,
        all subscribers together, is bounded (`backlog.FANOUT_BYTES_S`, `fanout`): past it an
        event is lost for every subscriber, and each is told as for a full backlog. One
        subscriber never gets near it; a thousand share it."""
        if self.fanout.take(len(data) * len(self.subscribers)):
            self.offer_all(data, count, log=log)
        else:
            self.lose_everywhere(len(data), count, log=log)

    def offer_all(self, data: bytes, count: int, *, log: bool) -> None:
        for sub in self.subscribers:
            self.offered += count
            if not sub.offer(data, count):
                self.lost += count
                self.lost_bytes += len(data)
                sub.stale = sub.stale or not log

    def lose_everywhere(self, size: int, count: int, *, log: bool) -> None:
        subscribers = self.subscribers
        for sub in subscribers:
            sub.lose(size, count)
            sub.stale = sub.stale or not log
        self.offered += count * len(subscribers)
        self.lost += count * len(subscribers)
        self.lost_bytes += size * len(subscribers)

    def resync_frames(self) -> list[bytes]:
        """A fresh `modelStatus` and in-flight snapshot, made once for every subscriber that
        needs them until the state changes again."""
        if self._resync is None or self._resync[0] != self.epoch:
            frames = [frame("modelStatus", self.model_status()), self.inflight_snapshot()]
            self._resync = (self.epoch, frames)
        return list(self._resync[1])

    def model_status(self) -> list[dict[str, Any]]:
        models: list[dict[str, Any]] = []
        table = self.state.routes.table
        for route in sorted(table.models, key=lambda m: m.id):
            rt = self.state.runtimes.get(route.id)
            models.append(model_item(route, rt.state if rt is not None else ModelState.STOPPED))
        for peer in table.peers:
            for name in peer.models:
                models.append(
                    {
                        "id": f"{peer.id}/{name}",
                        "name": "",
                        "description": "",
                        "state": ModelState.STOPPED,
                        "unlisted": False,
                        "peerID": peer.id,
                    }
                )
        return models

    def ui_config_frame(self) -> bytes:
        """llama-swap's `uiConfig`: its `ui` section, which its UI reads (the session headers)."""
        headers = list(self.state.routes.table.session_headers)
        return frame("uiConfig", {"activity": {"session_id": headers}})

    def inflight_snapshot(self) -> bytes:
        flights = sorted(self.in_flight.values(), key=lambda f: (f.timestamp, f.id))
        requests = [flight_json(f) for f in flights]
        return frame("inflight", {"operation": "snapshot", "requests": requests})

    def profile_frame(self) -> bytes:
        return frame("profileChanged", {"active": self.state.routes.table.active_profile})

    def _profile_changed(self) -> bool:
        active = self.state.routes.table.active_profile
        changed = active != self.active_profile
        self.active_profile = active
        return changed

    def _ui_changed(self) -> bool:
        headers = self.state.routes.table.session_headers
        changed = headers != self.session_headers
        self.session_headers = headers
        return changed

    def snapshot(self, reply: SnapshotReply) -> None:
        self.in_flight = {f.id: f for f in reply.in_flight}
        profile_changed = self._profile_changed()
        if self.subscribers:
            if profile_changed:
                self.broadcast(self.profile_frame())
            self.broadcast(frame("modelStatus", self.model_status()))
            self.broadcast(self.inflight_snapshot())

    def event(self, event: Event) -> None:
        if isinstance(event, InFlightChanged):
            for flight in event.upserts:
                self.in_flight[flight.id] = flight
            for key in event.removes:
                self.in_flight.pop(key, None)
        if isinstance(event, CancelRequested):
            self.on_cancel(event.id)
        profile_changed = isinstance(event, TableChanged) and self._profile_changed()
        ui_changed = isinstance(event, TableChanged) and self._ui_changed()
        if not self.subscribers:
            return
        if ui_changed:  # a reload changed `ui` (llama-swap's clients reconnect after one)
            self.broadcast(self.ui_config_frame())
        if profile_changed:  # as llama-swap: the profile, then the models
            self.broadcast(self.profile_frame())
        if isinstance(event, StateChanged | TableChanged):
            self.broadcast(frame("modelStatus", self.model_status()))
        elif isinstance(event, SwapRecorded):
            self.broadcast(frame("swap", event.record))
        elif isinstance(event, ActivityAdded) and event.count:
            self.broadcast(activity_frames(event.first, event.count), event.count)
        elif isinstance(event, InFlightChanged) and event.count:
            self.broadcast(event.frames, event.count)  # framed by the daemon, once for all


HUB_KEY: web.AppKey[EventHub] = web.AppKey("swapd_events", EventHub)
