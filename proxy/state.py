"""The proxy's local mirror of the daemon's routing table and model states.

The daemon is the only authority; this module keeps a copy fed by its broadcasts so the hot path can
route a request to a ready model without any IPC:

* `Routes`: one table generation, precomputed into lookup dicts and compiled regexes (never per
  request).
* `ModelRuntime`: one per model id, mutable, carried across table generations: the daemon's state
  and upstream plus this process's own counters (reserved, in flight, pending drain).
* `StateSync`: SUB to the daemon's events, a `Snapshot` to start from, events applied in `seq`
  order; a gap, a new daemon `instance` or a (re)connect of the event socket triggers a fresh
  snapshot. It also sends the `Hello` heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import zmq
import zmq.asyncio

from ..ipc import codec
from ..ipc.messages import (
    Draining,
    Event,
    ModelStatus,
    RouteModel,
    RoutePeer,
    RoutingTable,
    Snapshot,
    SnapshotReply,
    StateChanged,
    TableChanged,
)
from ..ipc.timings import HEARTBEAT_S

if TYPE_CHECKING:
    from .daemon_link import DaemonLink

log = logging.getLogger(__name__)

# States in which a model counts as "loaded" for /v1/models (llama-swap: any non-stopped state).
LOADED_STATES = frozenset({"starting", "ready", "draining", "stopping"})


@dataclass(frozen=True, slots=True)
class PeerTarget:
    peer: RoutePeer
    model: str  # the id the peer knows the model by


class Routes:
    """One generation of the routing table, with every lookup precomputed."""

    __slots__ = (
        "api_keys",
        "by_id",
        "by_name",
        "generation",
        "ignore_paths",
        "include_aliases_in_list",
        "log_dir",
        "peers",
        "table",
    )

    def __init__(self, table: RoutingTable) -> None:
        self.table = table
        self.generation = table.generation
        by_name: dict[str, RouteModel] = {}
        # Aliases first so an id always wins over another model's alias of the same text.
        for model in table.models:
            for alias in model.aliases:
                by_name.setdefault(alias, model)
        for model in table.models:
            by_name[model.id] = model
        self.by_name = by_name
        self.by_id = {model.id: model for model in table.models}
        peers: dict[str, PeerTarget] = {}
        bare: dict[str, list[PeerTarget]] = {}
        for peer in table.peers:
            for name in peer.models:
                target = PeerTarget(peer, name)
                peers.setdefault(f"{peer.id}/{name}", target)
                bare.setdefault(name, []).append(target)
        for name, targets in bare.items():
            # A bare name is accepted only when exactly one peer offers it and no FQN has that text.
            if len({t.peer.id for t in targets}) == 1 and name not in peers:
                peers[name] = targets[0]
        self.peers = peers
        self.api_keys = tuple(key.encode() for key in table.api_keys)
        self.ignore_paths = tuple(_compile(p) for p in table.ignore_paths)
        self.include_aliases_in_list = table.include_aliases_in_list
        self.log_dir = table.log_dir

    def model(self, name: str) -> RouteModel | None:
        return self.by_name.get(name)

    def peer(self, name: str) -> PeerTarget | None:
        return self.peers.get(name)

    def path_ignored(self, stripped_path: str) -> bool:
        return any(p.search(stripped_path) for p in self.ignore_paths)


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error:
        # The config loader validates these; a pattern Python cannot compile matches nothing rather
        # than taking the proxy down.
        log.error("ignorePaths pattern %r does not compile; ignoring it", pattern)
        return re.compile(r"(?!)")


@dataclass(slots=True, eq=False)
class ModelRuntime:
    """This process's view of one model: the daemon's state plus its own counters."""

    id: str
    route: RouteModel
    limit: int
    status: ModelStatus
    base_url: str = ""
    state: str = "stopped"
    # Requests admitted and not finished (waiting for ensure, or being served): the 429 counter.
    reserved: int = 0
    # Requests being served by the upstream (ignored websockets excluded): what holds a drain.
    in_flight: int = 0
    # Epoch of a `Draining` not yet acked; while set, nothing new is admitted on the hot path.
    drain_epoch: int | None = None
    drain_acked: bool = False
    # Ignored websockets, closed when the model stops.
    ignored_ws: set[object] = field(default_factory=set)
    # Activity cast bookkeeping (admission.py).
    activity_sent_at: float = 0.0
    # The in-flight count of the last cast: the daemon's view of this proxy.
    activity_sent_in_flight: int = 0
    activity_timer: asyncio.TimerHandle | None = None
    last_activity: float = 0.0

    @property
    def hot(self) -> bool:
        """Ready, and not being drained: serve straight away, no IPC."""
        return self.state == "ready" and self.drain_epoch is None


def per_process_limit(limit: int, processes: int) -> int:
    """The share of a model's concurrencyLimit one of `processes` proxy processes enforces."""
    return max(1, math.ceil(limit / processes))


class ProxyState:
    """The mirror itself. Single-threaded: mutated only on the event loop."""

    def __init__(self, processes: int = 1) -> None:
        self.processes = processes
        self.routes = Routes(RoutingTable(generation=-1))
        self.runtimes: dict[str, ModelRuntime] = {}
        self.instance = ""
        self.seq = -1
        self.synced = asyncio.Event()
        # Resolved (and replaced) whenever the daemon instance changes, so requests waiting on a
        # reply from a daemon that died can resend it.
        self.instance_changed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Hooks set by admission.py (drain acks, ignored websockets): called after each change.
        self.on_draining: Callable[[ModelRuntime, int], None] = lambda rt, epoch: None
        self.on_state: Callable[[ModelRuntime, str], None] = lambda rt, old: None
        self.updated_at = 0.0

    # ---------------------------------------------------------------------------------------------
    def runtime(self, model_id: str) -> ModelRuntime | None:
        return self.runtimes.get(model_id)

    def apply_snapshot(self, reply: SnapshotReply) -> None:
        if reply.instance != self.instance:
            old, self.instance_changed = (
                self.instance_changed,
                asyncio.get_running_loop().create_future(),
            )
            if not old.done():
                old.set_result(None)
        self.instance = reply.instance
        self.seq = reply.seq
        self._apply_table(reply.table)
        seen = set()
        for status in reply.models:
            seen.add(status.model)
            self._apply_status(status)
        # A model the daemon no longer reports is stopped as far as routing is concerned.
        for rt in self.runtimes.values():
            if rt.id not in seen and rt.state != "stopped":
                self._set_state(rt, "stopped")
        self.synced.set()
        self.updated_at = time.time()

    def apply_event(self, event: Event) -> None:
        if isinstance(event, StateChanged):
            self._apply_status(event.status)
        elif isinstance(event, TableChanged):
            self._apply_table(event.table)
        elif isinstance(event, Draining):
            rt = self.runtimes.get(event.model)
            if rt is not None:
                rt.drain_epoch = event.epoch
                rt.drain_acked = False
                self.on_draining(rt, event.epoch)
        self.seq = event.seq
        self.updated_at = time.time()

    def _apply_table(self, table: RoutingTable) -> None:
        self.routes = Routes(table)
        current = {m.id: m for m in table.models}
        for model_id in list(self.runtimes):
            if model_id not in current:
                self._set_state(self.runtimes.pop(model_id), "stopped")
        for model_id, route in current.items():
            limit = per_process_limit(route.concurrency_limit, self.processes)
            existing = self.runtimes.get(model_id)
            if existing is None:
                self.runtimes[model_id] = ModelRuntime(
                    id=model_id,
                    route=route,
                    limit=limit,
                    status=ModelStatus(model=model_id, state="stopped", ttl=route.ttl),
                    base_url=route.upstream.rstrip("/"),
                )
            else:
                existing.route = route
                existing.limit = limit
                if not existing.status.upstream:
                    existing.base_url = route.upstream.rstrip("/")

    def _apply_status(self, status: ModelStatus) -> None:
        rt = self.runtimes.get(status.model)
        if rt is None:
            return  # a model of a table generation we have not seen yet; the table event follows
        rt.status = status
        rt.base_url = (status.upstream or rt.route.upstream).rstrip("/")
        self._set_state(rt, status.state)

    def _set_state(self, rt: ModelRuntime, state: str) -> None:
        old = rt.state
        rt.state = state
        if state in ("starting", "ready") and old not in ("starting", "ready"):
            # A new run of the model: a drain of the previous run no longer applies.
            rt.drain_epoch = None
        if old != state:
            self.on_state(rt, old)


class StateSync:
    """Keeps a `ProxyState` in step with the daemon (see the module docstring)."""

    def __init__(
        self,
        state: ProxyState,
        link: DaemonLink,
        events_endpoint: str,
        *,
        context: zmq.asyncio.Context,
    ) -> None:
        self._state = state
        self._link = link
        self._sub = context.socket(zmq.SUB)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.setsockopt(zmq.SUBSCRIBE, b"")
        # Events published while the SUB is not connected are lost without a trace (zmq's slow
        # joiner: at start the daemon may not have bound yet, and a reconnect waits up to 100 ms).
        # A missed *last* event (say `ready`) would leave the mirror wrong until the next event, and
        # every request would take the slow `Ensure` path; so every (re)connect takes a snapshot.
        self._monitor = self._sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self._sub.connect(events_endpoint)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._sync_loop()), loop.create_task(self._heartbeat())]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._sub.disable_monitor()
        self._monitor.close(linger=0)
        self._sub.close(linger=0)

    async def _snapshot(self) -> None:
        delay = 0.05
        while True:
            try:
                reply = await self._link.request(lambda i: Snapshot(id=i), timeout=2.0)
            except Exception as exc:  # the daemon is not up yet, or restarting
                log.debug("snapshot failed (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            if isinstance(reply, SnapshotReply):
                self._state.apply_snapshot(reply)
                log.info(
                    "routing table generation %d from daemon %s (seq %d)",
                    reply.table.generation,
                    reply.instance,
                    reply.seq,
                )
                return
            log.warning("unexpected reply to Snapshot: %r", reply)
            await asyncio.sleep(delay)

    async def _sync_loop(self) -> None:
        # The mirror must never silently stop following the daemon: on any unexpected error, log
        # it and start over from a fresh snapshot.
        while True:
            try:
                await self._follow()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("following the daemon's events failed; resynchronising")
                await asyncio.sleep(0.5)

    async def _follow(self) -> None:
        state = self._state
        await self._snapshot()
        poller = zmq.asyncio.Poller()
        poller.register(self._sub, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        while True:
            ready = dict(await poller.poll())
            if self._monitor in ready:
                # Events already queued in the SUB are older than this snapshot or newer: the
                # seq checks below skip the former and apply the latter.
                await self._monitor.recv_multipart()
                await self._snapshot()
                continue
            if self._sub not in ready:
                continue
            data = await self._sub.recv()
            try:
                event = codec.decode_event(data)
            except codec.DecodeError as exc:
                log.warning("undecodable event from daemon: %s", exc)
                continue
            if event.instance != state.instance or event.seq > state.seq + 1:
                log.info("daemon restarted or events were missed; taking a new snapshot")
                await self._link.hello()
                await self._snapshot()
                continue
            if event.seq <= state.seq:
                continue  # already contained in the snapshot
            state.apply_event(event)

    async def _heartbeat(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self._link.hello()
            await asyncio.sleep(HEARTBEAT_S)
