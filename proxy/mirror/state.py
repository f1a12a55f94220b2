"""The proxy's local mirror of the daemon's routing table and model states.

The daemon is the only authority; this module keeps a copy fed by its broadcasts so the pipeline can
route a request to a ready model without any IPC:

* `Routes`: one table generation, precomputed into lookup dicts and compiled regexes (never per
  request).
* `ModelRuntime`: one per model id, mutable, carried across table generations: the daemon's state
  and upstream plus this process's own counters (reserved, in flight, pending drain).

`sync.StateSync` feeds it from the daemon's events; once each is applied, the mirror tells its
listeners (`changes.py`, `ProxyState.changes`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass, field

from ...ipc import aliases
from ...ipc.messages import Draining, Event, SnapshotReply, StateChanged, TableChanged
from ...ipc.model_status import ModelStatus
from ...ipc.routing_table import RouteModel, RoutePeer, RouteSelector, RoutingTable
from ...ipc.states import DOZING_STATES, SERVING_STATES, ModelState
from ..floor.matching import compile_path_pattern
from ..upstream.address import NOWHERE, UpstreamAddress
from .changes import Applied, Changes

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PeerTarget:
    peer: RoutePeer
    model: str  # the id the peer knows the model by
    address: UpstreamAddress


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
        "longest_name",
        "max_name_parts",
        "peers",
        "pins",
        "selectors",
        "table",
    )

    def __init__(self, table: RoutingTable) -> None:
        self.table = table
        self.generation = table.generation
        by_name = aliases.name_index((m.id, m.aliases, m) for m in table.models)
        self.by_name = by_name
        self.by_id = {model.id: model for model in table.models}
        peers: dict[str, PeerTarget] = {}
        bare: dict[str, list[PeerTarget]] = {}
        for peer in table.peers:
            address = UpstreamAddress.parse(peer.proxy)
            for name in peer.models:
                target = PeerTarget(peer, name, address)
                peers.setdefault(f"{peer.id}/{name}", target)
                bare.setdefault(name, []).append(target)
        for name, targets in bare.items():
            # A bare name is accepted only when exactly one peer offers it and no FQN has that text.
            if len({t.peer.id for t in targets}) == 1 and name not in peers:
                peers[name] = targets[0]
        self.peers = peers
        # The most `/`-separated parts any model or peer name has: `/upstream/` resolution never
        # needs to try more leading path segments than that (decide.py).
        self.max_name_parts = max((n.count("/") + 1 for n in (*by_name, *peers)), default=1)
        self.longest_name = max((len(n) for n in (*by_name, *peers)), default=0)
        self.api_keys = tuple(key.encode() for key in table.api_keys)
        self.ignore_paths = tuple(compile_path_pattern(p) for p in table.ignore_paths)
        self.include_aliases_in_list = table.include_aliases_in_list
        self.log_dir = table.log_dir
        # The active profile's pins: a name a client asks for -> its target ("" disables it).
        active = [p for p in table.profiles if p.id == table.active_profile]
        self.pins: dict[str, str] = dict(active[0].pins) if active else {}
        self.selectors: dict[str, RouteSelector] = {s.id: s for s in table.selectors}

    def model(self, name: str) -> RouteModel | None:
        """The alias rule, in one place: an id, else an alias (ids win over aliases)."""
        return self.by_name.get(name)

    def peer(self, name: str) -> PeerTarget | None:
        return self.peers.get(name)

    def path_ignored(self, decoded_path: str) -> bool:
        return any(p.search(decoded_path) for p in self.ignore_paths)


@dataclass(slots=True, eq=False)
class ModelRuntime:
    """This process's view of one model: the daemon's state plus its own counters."""

    id: str
    route: RouteModel
    limit: int
    status: ModelStatus
    address: UpstreamAddress = NOWHERE
    state: ModelState = ModelState.STOPPED
    # Requests admitted and not finished (waiting for ensure, or being served): the 429 counter.
    reserved: int = 0
    # Requests being served by the upstream (ignored websockets excluded): what holds a drain.
    in_flight: int = 0
    # Epoch of a `Draining` not yet acked; while set, nothing new is admitted without the daemon.
    drain_epoch: int | None = None
    drain_acked: bool = False
    # Ignored websockets, closed when the model stops.
    ignored_ws: set[object] = field(default_factory=set)
    # Activity cast bookkeeping (admission.py).
    activity_sent_at: float = 0.0
    # The in-flight count of the last cast: the daemon's view of this proxy.
    activity_sent_in_flight: int = 0
    # The open ignored websockets of the last cast (they hold an asleep model's `stopAfter`).
    activity_sent_websockets: int = 0
    activity_timer: asyncio.TimerHandle | None = None
    activity_due: float = (
        0.0  # the loop's clock when `activity_timer` fires (uvloop's has no when())
    )
    last_activity: float = 0.0
    # The loop's clock when the in-flight count last fell to zero (the idle edge, told once the
    # model stayed idle IDLE_EDGE_S).
    idle_since: float = 0.0

    @property
    def base_url(self) -> str:
        return self.address.url

    @property
    def hot(self) -> bool:
        """Ready, and not being drained: serve straight away, no IPC."""
        return self.state == ModelState.READY and self.drain_epoch is None


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
        # Told of every message once it is applied: the one way a change reaches anyone.
        self.changes = Changes()
        # The models whose state the message being applied set, with their states before.
        self._models_set: list[tuple[ModelRuntime, ModelState]] = []

    # ---------------------------------------------------------------------------------------------
    def ready(self, model_id: str) -> bool:
        """Whether `model_id` is hot in this process (the route decision's `Ready`)."""
        rt = self.runtimes.get(model_id)
        return rt is not None and rt.hot

    def dozing(self, model_id: str) -> bool:
        """Whether `model_id` sleeps, falls asleep or wakes: its process runs without its GPU
        memory (the route decision's `dozing`)."""
        rt = self.runtimes.get(model_id)
        return rt is not None and rt.state in DOZING_STATES

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
            if rt.id not in seen and rt.state != ModelState.STOPPED:
                self._set_state(rt, ModelState.STOPPED)
        self.synced.set()
        self._tell(reply)

    def apply_event(self, event: Event) -> None:
        draining = None
        if isinstance(event, StateChanged):
            self._apply_status(event.status)
        elif isinstance(event, TableChanged):
            self._apply_table(event.table)
        elif isinstance(event, Draining):
            draining = self.runtimes.get(event.model)
            if draining is not None:
                draining.drain_epoch = event.epoch
                draining.drain_acked = False
        self.seq = event.seq
        self._tell(event, draining)

    def _tell(self, message: Event | SnapshotReply, draining: ModelRuntime | None = None) -> None:
        models, self._models_set = tuple(self._models_set), []
        self.changes.tell(Applied(message, models, draining))

    def _apply_table(self, table: RoutingTable) -> None:
        self.routes = Routes(table)
        current = {m.id: m for m in table.models}
        for model_id in list(self.runtimes):
            if model_id not in current:
                self._set_state(self.runtimes.pop(model_id), ModelState.STOPPED)
        for model_id, route in current.items():
            limit = per_process_limit(route.concurrency_limit, self.processes)
            existing = self.runtimes.get(model_id)
            if existing is None:
                self.runtimes[model_id] = ModelRuntime(
                    id=model_id,
                    route=route,
                    limit=limit,
                    status=ModelStatus(model=model_id, state=ModelState.STOPPED, ttl=route.ttl),
                    address=UpstreamAddress.parse(route.upstream),
                )
            else:
                existing.route = route
                existing.limit = limit
                if not existing.status.upstream:
                    existing.address = UpstreamAddress.parse(route.upstream)

    def _apply_status(self, status: ModelStatus) -> None:
        rt = self.runtimes.get(status.model)
        if rt is None:
            return  # a model of a table generation we have not seen yet; the table event follows
        rt.status = status
        rt.address = UpstreamAddress.parse(status.upstream or rt.route.upstream)
        self._set_state(rt, status.state)

    def _set_state(self, rt: ModelRuntime, state: ModelState) -> None:
        old = rt.state
        rt.state = state
        if state in SERVING_STATES and old not in SERVING_STATES:
            # A new run of the model: a drain of the previous run no longer applies.
            rt.drain_epoch = None
        self._models_set.append((rt, old))
