"""The daemon's periodic chores, every TICK: TTL unloads (or sleeps), asleep models stopped after
their `sleep.stopAfter`, silent proxies forgotten, `busyCheck` polls, the GPU ledger's memory
samples, lingering ports checked again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ..ipc.causes import StopCause
from .busy_checks import BusyChecks
from .gpu_ledger import SAMPLE_EVERY, GpuLedger
from .machinery.lifecycle import Lifecycle
from .machinery.model_process import Running
from .observe.metrics import Metrics
from .policy import ttl
from .policy.keep_asleep import Learned
from .policy.proxies import ProxyRegistry
from .policy.records import ModelRecord
from .policy.scheduler import Scheduler

log = logging.getLogger("swapd.daemon")

TICK = 0.25
# The lingering ports are checked again this often (and before each start of their model).
LINGER_RECHECK = 2.0


async def tick_loop(
    scheduler: Scheduler[Running],
    registry: ProxyRegistry,
    busy: BusyChecks,
    lifecycle: Lifecycle,
    metrics: Metrics,
    ledger: GpuLedger | None,
    *,
    forget: Callable[[str], None],
    publish_state: Callable[[ModelRecord[Running]], None],
    spawn: Callable[[Coroutine[Any, Any, Any]], object],
    learned: Learned | None = None,
) -> None:
    last_recheck = last_sample = 0.0
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(TICK)
        if ledger is not None and loop.time() - last_sample >= SAMPLE_EVERY:
            last_sample = loop.time()
            for model_id in await ledger.sample(scheduler.occupants()):
                publish_state(scheduler.record(model_id))
        for gone in registry.expire():
            forget(gone)
        config = scheduler.config
        records = list(scheduler.records.values())
        busy.tick(records, config, registry)
        for model_id in ttl.due(records, config, registry, held=busy.held):
            model = config.models.get(model_id)
            kept = ttl.effective_ttl(scheduler.record(model_id), model, registry)
            what = "putting it to sleep" if model is not None and model.sleep else "unloading"
            log.info("%s: %s, TTL of %ss reached", model_id, what, "?" if kept is None else kept)
            metrics.ttl_unloads.labels(model_id).inc()
            spawn(scheduler.idle(model_id, StopCause.TTL))
        for model_id in ttl.asleep_due(records, registry, learned=learned):
            if scheduler.stops.under_way(model_id) or scheduler.swaps.get(model_id) is not None:
                continue  # already being stopped, or woken
            early = learned is not None and not ttl.asleep_due(
                [scheduler.record(model_id)], registry
            )
            log.info(
                "%s: unloading, asleep longer than %s",
                model_id,
                "it was ever asked back after (learned), before its sleep.stopAfter"
                if early
                else "its sleep.stopAfter (and what was learned) allows",
            )
            spawn(scheduler.stop(model_id, StopCause.ASLEEP_TTL))
        if lifecycle.lingering and loop.time() - last_recheck >= LINGER_RECHECK:
            last_recheck = loop.time()
            for model_id in lifecycle.recheck_lingering():
                publish_state(scheduler.record(model_id))
