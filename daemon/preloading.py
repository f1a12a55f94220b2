"""`hooks.on_startup.preload`: the models started once per swapd start."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from ..ipc.causes import StartCause
from ..ipc.endpoints import PRELOADED_FILE
from .errors import EnsureError
from .machinery.model_process import Running
from .policy import names
from .policy.scheduler import Scheduler

log = logging.getLogger("swapd.daemon")


def preload(
    run_dir: Path,
    scheduler: Scheduler[Running],
    spawn: Callable[[Coroutine[Any, Any, Any]], object],
    wanted: Callable[[str, StartCause], None],
) -> None:
    """Not again when circusd restarts the daemon (the new daemon adopted what runs, maybe a
    model the user loaded since). `wanted` tells the swap log why each start was asked for."""
    marker = run_dir / PRELOADED_FILE
    if marker.exists():
        if scheduler.config.preload:
            log.info("preload skipped: it ran when this swapd started (daemon restarted)")
        return
    try:
        marker.touch(mode=0o600)
    except OSError as exc:
        log.warning("cannot write %s (%s): a restarted daemon would preload again", marker, exc)
    for model_id in scheduler.config.preload:
        spawn(_preload_one(scheduler, model_id, wanted))


async def _preload_one(
    scheduler: Scheduler[Running],
    model_id: str,
    wanted: Callable[[str, StartCause], None],
) -> None:
    try:
        model = names.resolve(scheduler.config, model_id)
        wanted(model.id, StartCause.PRELOAD)
        await scheduler.ensure(model.id)
    except EnsureError as exc:
        log.error("preload of %s failed: %s", model_id, exc.message)
