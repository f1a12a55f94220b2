"""`swapd reload`: read the config again, switch the scheduler to it, stop what it changed.

What to stop is `policy/reload.py`'s decision; this module does it. The reply carries the same
warnings `swapd check-config` prints for the file (`accepted but ignored` keys and the like),
a refused file's with its errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ipc import log_time
from .config import Config, ConfigError, ConfigIssue, ConfigSources, ModelConfig, load
from .errors import DaemonError, GpuError, InvalidConfig
from .machinery import gpu
from .machinery.gpu_backend import GpuBackend
from .machinery.model_process import Running, definition_hash
from .policy import reload
from .policy.scheduler import Scheduler

log = logging.getLogger("swapd.daemon")
# How a warning line starts in what `swapd reload` prints (the CLI sends those lines to stderr).
WARNING = "warning: "


@dataclass(frozen=True)
class Reloaded:
    config: Config
    stopped: list[str]  # loaded models whose definition changed (or that were removed)
    restarted: list[str]  # starts under way whose definition changed: started again
    warnings: tuple[ConfigIssue, ...]


async def apply(
    scheduler: Scheduler[Running], path: Path | ConfigSources, backend: GpuBackend
) -> Reloaded:
    """Raises InvalidConfig (the old config stays) when the file cannot be used."""
    records = list(scheduler.records.values())
    keep = reload.ports_to_keep(
        {mid: m.port for mid, m in scheduler.config.models.items()},
        ((r.id, r.handle.port) for r in records if r.handle is not None),
    )
    try:
        loaded = await asyncio.to_thread(load, path, ports=keep)
        gpu.verify_gpus(backend, loaded.config)
    except ConfigError as exc:
        # The file's warnings go with its errors: the typo a warning names is met next otherwise.
        lines = [str(exc), *(f"{WARNING}{warning}" for warning in exc.warnings)]
        raise InvalidConfig("\n".join(lines)) from exc
    except GpuError as exc:
        raise InvalidConfig(str(exc)) from exc
    new = loaded.config
    fresh = {mid: definition_hash(m) for mid, m in new.models.items()}
    stopped = reload.changed(
        {r.id: r.handle.definition for r in records if r.handle is not None}, fresh
    )

    def outdated(model: ModelConfig) -> bool:
        return fresh.get(model.id) != definition_hash(model)

    # Switch first, so every start from now on (a swap queued behind one of these stops, or an
    # aborted start going round again) uses the new definition; a stop uses the definition the
    # process was started with (its own cmdStop).
    restarted = await scheduler.reconfigure(new, stopped, outdated)
    return Reloaded(new, stopped, restarted, loaded.warnings)


async def apply_logged(
    scheduler: Scheduler[Running], path: Path | ConfigSources, backend: GpuBackend, why: str
) -> Reloaded:
    """`apply`, with the outcome in the log: a refused file's whole report (then DaemonError is
    raised and the old config keeps serving), or the new file's warnings."""
    try:
        result = await apply(scheduler, path, backend)
    except Exception as exc:
        log.error("reload (%s) rejected, the old config stays: %s", why, exc)
        if not isinstance(exc, DaemonError):
            exc = InvalidConfig(f"{type(exc).__name__}: {exc}")
        raise exc from None
    log_time.restamp(result.config.log_time_format)
    for warning in result.warnings:
        log.warning("%s", warning)
    return result


async def quietly(reloading: Coroutine[Any, Any, Reloaded]) -> None:
    """A reload nobody waits for (SIGHUP): its refusal is in the log already."""
    with contextlib.suppress(DaemonError):
        await reloading


def report(path: Path | ConfigSources, result: Reloaded) -> str:
    """What `swapd reload` prints: check-config's warnings (one `warning: ` line each, which the
    CLI writes to stderr as check-config does), then what the reload did."""
    lines = [f"{WARNING}{warning}" for warning in result.warnings]
    text = f"reloaded {path}"
    if result.stopped:
        text += f"; stopped changed models: {', '.join(result.stopped)}"
    if result.restarted:
        text += f"; restarted starts with the new definition: {', '.join(result.restarted)}"
    return "\n".join([*lines, text])
