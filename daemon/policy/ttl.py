"""TTL: a ready model unloads after `ttl` seconds without activity (0 = never). Activity is what
the proxies report; a request in flight in any live proxy holds the model. Proxies hold a report
back up to a second (one Activity per second per model), so a model is never due within
REPORT_GRACE of its last report or Ready reply. A model whose `busyCheck` finds it busy is held
too: `held` is infinite while it is busy, then the time it turned idle (`policy/busy_board.py`).

A request may set how long the current run stays loaded in place of `ttl` (Ollama's
`keep_alive`, `ProxyRegistry.keep`): that many seconds, or never, or 0: as soon as it is no longer
in use (`in_use`: no request in flight, none begun or ended for IN_USE_FOR, 3 s, its busyCheck
idle), so that one client's `keep_alive: 0` does not unload a model under the people chatting
with it (docs/swapping.md, "No one client thrashes the GPU"); the same holds for Ollama's unload
(a `keep_alive: 0` with nothing to answer) of a model in use.

A model with a sleep setting goes to sleep when its TTL runs out (the daemon's chores ask the
scheduler to `idle` it), and an asleep one is stopped once it has been asleep and unused for its
`sleep.stopAfter` (0: never): `stop_left`, `asleep_due`. An asleep model with a websocket open
(an open ComfyUI tab, served by its asleep server) is not stopped: `stopAfter` counts from when
the last one closed, so a tab never sees its server stopped and its page reload it. With the
traffic learned (`learn`), `stopAfter` is weighed against how soon the model is asked back
(`keep_asleep.py`): stopped sooner, or kept asleep longer, up to 4 x `stopAfter`."""

from __future__ import annotations

import math
from collections.abc import Callable

from ...ipc.routing_table import SleepSetting
from ...ipc.states import ModelState
from ...ipc.timings import REPORT_GRACE
from ..config import Config, ModelConfig
from . import keep_asleep
from .collation import IN_USE_FOR
from .proxies import ProxyRegistry
from .records import H, ModelRecord


def last_used(rec: ModelRecord[H], registry: ProxyRegistry) -> float:
    # A model that became ready but never served counts from its ready time (llama-swap counts from
    # the epoch and unloads such a model at the first tick).
    return max(registry.last_activity.get(rec.id, 0.0), rec.since)


def in_use(
    rec: ModelRecord[H], registry: ProxyRegistry, held: float = 0.0, now: float | None = None
) -> bool:
    """Whether `rec` serves requests now: one in flight in a live proxy, busy by its busyCheck
    (`held` infinite), or a request of this run begun or ended (or the check turned idle) within
    IN_USE_FOR. Its start is not use: a model loaded and never asked is not in use."""
    if registry.in_flight(rec.id) > 0 or held == math.inf:
        return True
    now = registry.wall() if now is None else now
    used = registry.last_activity.get(rec.id, 0.0)
    if used < rec.since:
        used = 0.0  # an earlier run's
    return now - max(used, held) < IN_USE_FOR


def effective_ttl(
    rec: ModelRecord[H], model: ModelConfig | None, registry: ProxyRegistry
) -> float | None:
    """Seconds of idleness after which `rec` unloads, or None when it never does by TTL: the
    keep_alive a request set for this run, else its `ttl` (0: never)."""
    pid = rec.handle.pid if rec.handle is not None else None
    kept = registry.kept(rec.id, pid)
    if kept is not None:
        return None if kept < 0 else kept
    if model is None or model.ttl <= 0:
        return None
    return float(model.ttl)


def ttl_left(
    rec: ModelRecord[H],
    config: Config,
    registry: ProxyRegistry,
    now: float | None = None,
    held: float = 0.0,
) -> float | None:
    """Seconds until the TTL unloads `rec`; None when no TTL applies (off, not ready, in use)."""
    return ttl_left_of(rec, config.models.get(rec.id), registry, now, held)


def ttl_left_of(
    rec: ModelRecord[H],
    model: ModelConfig | None,
    registry: ProxyRegistry,
    now: float | None = None,
    held: float = 0.0,
) -> float | None:
    """`ttl_left` for `rec` whose definition is `model` (None: a reload removed it)."""
    if model is None or rec.state != ModelState.READY:
        return None
    ttl = effective_ttl(rec, model, registry)
    if ttl is None or registry.in_flight(rec.id) > 0 or held == math.inf:
        return None
    if ttl == 0:
        ttl = IN_USE_FOR  # keep_alive 0: once no longer in use, not as its last request ended
    now = registry.wall() if now is None else now
    left = ttl - (now - max(last_used(rec, registry), held))
    unreported = REPORT_GRACE - (now - registry.last_report.get(rec.id, 0.0))
    return max(0.0, left, unreported)


def due(
    records: list[ModelRecord[H]],
    config: Config,
    registry: ProxyRegistry,
    now: float | None = None,
    held: Callable[[str], float] | None = None,
) -> list[str]:
    return [
        rec.id
        for rec in records
        if ttl_left(rec, config, registry, now, held(rec.id) if held else 0.0) == 0.0
    ]


def stop_left(
    rec: ModelRecord[H],
    setting: SleepSetting,
    registry: ProxyRegistry,
    now: float | None = None,
    learned: keep_asleep.Learned | None = None,
) -> float | None:
    """Seconds until an asleep model is stopped for its `stopAfter`; None: never (or awake, or
    a websocket to it is open). Counted from when it fell asleep, its last request, or its last
    websocket closed, whichever came last; weighed by what is `learned` of its returns."""
    if rec.state != ModelState.ASLEEP or setting.stop_after <= 0:
        return None
    if registry.websockets(rec.id) > 0:
        return None
    now = registry.wall() if now is None else now
    since = asleep_since(rec, registry)
    if learned is None:
        return max(0.0, setting.stop_after - (now - since))
    at = now

    def chance(idle: float) -> float | None:
        return learned.back_chance(rec.id, idle, setting.stop_after, at)

    return keep_asleep.stop_left(now - since, setting.stop_after, chance, learned.roomy())


def asleep_since(rec: ModelRecord[H], registry: ProxyRegistry) -> float:
    """When an asleep model was last used: it fell asleep, its last request, or its last
    websocket closed, whichever came last."""
    return max(
        rec.since,
        registry.last_activity.get(rec.id, 0.0),
        registry.last_socket.get(rec.id, 0.0),
    )


def asleep_due(
    records: list[ModelRecord[H]],
    registry: ProxyRegistry,
    now: float | None = None,
    learned: keep_asleep.Learned | None = None,
) -> list[str]:
    """The asleep models whose `stopAfter` ran out (or that the learning stops)."""
    return [
        rec.id
        for rec in records
        if rec.asleep_with is not None
        and stop_left(rec, rec.asleep_with, registry, now, learned) == 0.0
    ]
