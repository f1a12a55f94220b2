"""The daemon's SIGTERM: when swapd stops, stop admitting, drain, then stop the models; when
only the daemon stops, leave them to the next one. Which case it is, is `policy/shutdown.py`'s
decision; this module does it."""

from __future__ import annotations

import asyncio
import logging

from ..ipc import watcher_names
from ..ipc.states import ModelState
from .errors import CircusError, CircusUnavailable
from .machinery import notify
from .machinery.circus_client import CircusClient
from .machinery.exit_watch import ExitWatch
from .machinery.lifecycle import Lifecycle
from .machinery.model_process import Running
from .policy import shutdown
from .policy.proxies import ProxyRegistry
from .policy.records import ModelRecord
from .policy.scheduler import Scheduler

log = logging.getLogger("swapd.daemon")


async def stop(
    scheduler: Scheduler[Running],
    lifecycle: Lifecycle,
    registry: ProxyRegistry,
    circus: CircusClient,
    exits: ExitWatch,
    *,
    grace: float,
) -> None:
    notify.stopping()
    # circusd signals the model watchers before the daemon: a model whose client exited just
    # now is being cleaned up (its cmdStop included). That must finish before the daemon goes.
    under_way = scheduler.stops_under_way()
    records = list(scheduler.records.values())
    loaded = [r for r in records if r.handle is not None]
    starting = [r for r in records if r.state == ModelState.STARTING]
    if not loaded and not starting:
        await scheduler.shutdown()
        lifecycle.closing = True
        await asyncio.gather(*under_way, return_exceptions=True)
        return
    try:
        reply = await circus.call("status", timeout=2.0)
        statuses: dict[str, str] | None = reply.get("statuses") or None
    except (CircusUnavailable, CircusError):
        statuses = None
    if not shutdown.everything_stops(
        statuses,
        watcher_names.PROXY_WATCHER,
        [watcher_names.watcher_name(r.id) for r in loaded],
        [watcher_names.watcher_name(r.id) for r in starting],
    ):
        # A start cancelled when the loop closes must leave its process to the next daemon.
        lifecycle.detached = True
        log.info("daemon stopping alone; %d models keep running", len(loaded) + len(starting))
        return
    await scheduler.shutdown()  # no new requests admitted; the waiting ones get 503
    lifecycle.closing = True
    log.info(
        "circusd is shutting down: %d models (%d starting); waiting up to %gs for the requests "
        "in flight",
        len(loaded) + len(starting),
        len(starting),
        grace,
    )
    aborting = asyncio.ensure_future(scheduler.abort_starts())
    if not await registry.wait_idle(grace):
        log.warning("shutdown grace of %gs over: stopping models under requests in flight", grace)

    async def stop_one(rec: ModelRecord[Running]) -> None:
        handle = rec.handle
        if handle is None:
            return
        exits.unwatch(rec.id)
        model = rec.model or scheduler.config.models.get(rec.id)
        await lifecycle.stop(handle, model, remove=False)

    await asyncio.gather(
        aborting, *(stop_one(rec) for rec in loaded), *under_way, return_exceptions=True
    )
