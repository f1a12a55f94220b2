"""Adoption after a daemon restart: every `model-*` watcher circusd still runs is taken over as it
is (same pid, no restart). Its model id, port and definition hash travel in the watcher's env; a
process the last daemon put to sleep is marked in the run directory (`asleep/`), and is adopted
asleep.

A process whose model is gone from the config, or whose definition changed, is stopped; a dead
watcher is removed; a process that does not answer its health check yet (the old daemon died
while it was starting) is given the rest of its health-check time in the background.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Protocol

import msgspec
import psutil

from ...ipc import watcher_names
from ..config import Config, ModelConfig
from ..errors import CircusError, CircusUnavailable
from . import health, pid_watch
from .circus_client import CircusClient
from .lifecycle import Lifecycle
from .model_process import ENV_HASH, ENV_MODEL_ID, ENV_PORT, Running, definition_hash, health_url

log = logging.getLogger("swapd.reconcile")


@dataclass(frozen=True)
class Found:
    watcher: str
    model: str
    pid: int | None
    definition: str
    env: dict[str, str]


async def discover(circus: CircusClient) -> list[Found]:
    # circusd may still be starting when the daemon is (its first watcher); give it a moment.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10.0
    while True:
        try:
            names = (await circus.call("list", timeout=2.0)).get("watchers", [])
            break
        except CircusUnavailable:
            if loop.time() > deadline:
                raise
    found = []
    for name in names:
        if not watcher_names.is_model_watcher(name):
            continue
        try:
            options = (await circus.call("get", name=name, keys=["env"])).get("options", {})
            pids = (await circus.call("list", name=name)).get("pids", [])
        except CircusError as exc:
            log.warning("cannot inspect watcher %s: %s", name, exc)
            continue
        env = {str(k): str(v) for k, v in (options.get("env") or {}).items()}
        try:
            model_id = env.get(ENV_MODEL_ID) or watcher_names.model_id(name)
        except ValueError:
            log.warning("watcher %s is not one of swapd's; leaving it alone", name)
            continue
        pid = next((int(p) for p in pids if pid_watch.is_alive(int(p))), None)
        found.append(Found(name, model_id, pid, env.get(ENV_HASH, ""), env))
    return found


def _started_at(pid: int) -> float:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return time.time()


class Adopter(Protocol):
    """What takes over the processes found (the scheduler)."""

    def adopt(self, model: ModelConfig, handle: Running, *, asleep: bool = False) -> None: ...

    def adopt_when_healthy(
        self, model: ModelConfig, waiting: Coroutine[object, object, Running | None]
    ) -> None: ...


WatchExit = Callable[[str, int], None]


async def adopt(
    circus: CircusClient,
    lifecycle: Lifecycle,
    config: Config,
    adopter: Adopter,
    watch_exit: WatchExit,
) -> None:
    """Take over (or stop) every model process circusd still runs; `watch_exit(model, pid)`
    watches each adopted one."""
    for item in await discover(circus):
        model = config.models.get(item.model)
        if item.pid is None:
            log.info("removing dead watcher %s", item.watcher)
            await lifecycle.remove_watcher(item.model)
            continue
        running = Running(
            model=item.model,
            pid=item.pid,
            upstream=model.proxy if model else "",
            port=int(item.env[ENV_PORT]) if ENV_PORT in item.env else None,
            gpus=_gpus_of(model, item.env),
            started_at=_started_at(item.pid),
            definition=item.definition,
        )
        if model is None or definition_hash(model) != item.definition:
            why = "no longer in the config" if model is None else "its definition changed"
            log.info("stopping %s (pid %d): %s", item.model, item.pid, why)
            await lifecycle.stop(running, model, timeout=model.unload_timeout if model else 10)
            continue
        url = health_url(model)
        if url is None or await health.probe(lifecycle.session, url, 2.0):
            lifecycle.track(running)
            # The last daemon put it to sleep: it stays asleep (its next request wakes it).
            asleep = model.sleep is not None and lifecycle.sleeper.was_asleep(model.id, item.pid)
            adopter.adopt(_placed(model, running), running, asleep=asleep)
            watch_exit(model.id, running.pid)
            how = "asleep" if asleep else running.upstream
            log.info("adopted %s (pid %d, %s)", model.id, running.pid, how)
        else:
            # Ensures for it (a proxy sends again those the old daemon never answered) join this
            # wait instead of starting a second process.
            adopter.adopt_when_healthy(
                _placed(model, running), _adopt_when_healthy(lifecycle, watch_exit, model, running)
            )


async def _adopt_when_healthy(
    lifecycle: Lifecycle, watch_exit: WatchExit, model: ModelConfig, running: Running
) -> Running | None:
    """`running` once healthy; None when it exited or timed out (it is stopped then). Cancelled
    (an unload, a reload, a shutdown): it is stopped unless the daemon leaves it to the next one."""
    exited = asyncio.ensure_future(pid_watch.wait_exit(running.pid))
    remaining = max(1.0, model.health_check_timeout - (time.time() - running.started_at))
    try:
        await health.wait_healthy(
            lifecycle.session,
            health_url(model),
            timeout=remaining,
            exited=exited,
        )
    except (health.ProcessExited, health.HealthTimeout):
        log.warning("%s (pid %d) was starting and did not become healthy", model.id, running.pid)
        await lifecycle.stop(running, model, timeout=5.0)
        return None
    except asyncio.CancelledError:
        if not lifecycle.detached:
            await asyncio.shield(lifecycle.stop(running, model, timeout=5.0))
        raise
    finally:
        exited.cancel()
    lifecycle.track(running)
    watch_exit(model.id, running.pid)
    log.info("adopted %s (pid %d) once healthy", model.id, running.pid)
    return running


def _gpus_of(model: ModelConfig | None, env: Mapping[str, str]) -> tuple[str, ...]:
    if model is not None and model.gpus_auto:
        # Placed by memory: where its start put it, as its environment says.
        placed = env.get("CUDA_VISIBLE_DEVICES", "")
        return tuple(g for g in placed.split(",") if g)
    return tuple(model.gpus or ()) if model else ()


def _placed(model: ModelConfig, running: Running) -> ModelConfig:
    if not model.gpus_auto or not running.gpus:
        return model
    return msgspec.structs.replace(model, gpus=running.gpus)
