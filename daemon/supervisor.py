"""The daemon's owner (as circus's `arbiter.py` is to its `controller.py`): it builds the parts
and wires them. The machinery (`machinery/`: circus, processes, ports, GPUs), the policy
(`policy/`: the scheduler, eviction, TTL, the proxies' liveness) and the endpoint
(`endpoint.py`: sockets, dispatch, publishing) know nothing of each other; this module hands each
what it needs; `answering.py` answers each request type from the endpoint's dispatch table.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import time
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import zmq.asyncio

from ..ipc.activity import ActivityRecord
from ..ipc.endpoints import Endpoints
from ..ipc.messages import (
    StateChanged,
    TableChanged,
)
from ..ipc.model_status import ModelStatus
from ..ipc.states import ModelState
from . import chores, config_watch, gpu_ledger, preloading, reloading, routing, stopping
from .announcing import Announcer
from .answering import Answers
from .busy_checks import BusyChecks
from .config import Config, ConfigSources
from .effects import DaemonEffects, Phases, StatePublisher
from .endpoint import Endpoint
from .machinery import gpu, ports, readiness, reconcile
from .machinery.circus_client import CircusClient
from .machinery.exit_watch import ExitWatch
from .machinery.kv_slots import KvSlots
from .machinery.lifecycle import GPU_RELEASE_TIMEOUT, Lifecycle
from .machinery.model_process import Running
from .observe.host_service import HostService
from .observe.learning import Learning
from .observe.metrics import Metrics
from .observe.service import Observer
from .observe.swap_log import SwapLog
from .policy import shutdown
from .policy.eviction.choose import choose
from .policy.proxies import ProxyRegistry
from .policy.records import ModelRecord
from .policy.scheduler import Scheduler
from .readings import DaemonReadings
from .status import StatusView

log = logging.getLogger("swapd.daemon")

# How long a stop waits for NVML to show the model's GPU memory released (default 10 s).
GPU_RELEASE_ENV = "SWAPD_GPU_RELEASE_TIMEOUT"
# How long a start waits for a port its model's last stop left in use (default 10 s).
LINGERING_START_WAIT_ENV = "SWAPD_LINGERING_START_WAIT"


class Daemon:
    def __init__(
        self,
        run_dir: Path,
        config_path: ConfigSources,
        config: Config,
        *,
        shutdown_grace: float = shutdown.DEFAULT_GRACE,
        watch_config: bool = False,
    ) -> None:
        # Each part is built once what it needs is there, and gets it here; nothing is handed to
        # a part later. The events that come back (a process exited, a busy reading changed) are
        # this owner's to answer (`_exited`, `_busy_changed`).
        self.endpoints = Endpoints(run_dir)
        self.watch_config = watch_config
        self.config_path = config_path
        self.shutdown_grace = shutdown_grace
        self.instance = uuid.uuid4().hex[:12]
        self.started = time.time()
        self.generation = 1
        self.ctx = zmq.asyncio.Context()
        self.circus = CircusClient(self.endpoints.circus_ctl, context=self.ctx)
        self.gpu_backend = gpu.make_backend()
        gpu.verify_gpus(self.gpu_backend, config)
        self.registry = ProxyRegistry()
        self.endpoint = Endpoint(self.endpoints, self.instance, self.ctx)
        # Placement by memory's GPU memory ledger (None without a GPU inventory).
        self.ledger = gpu_ledger.make_ledger(self.gpu_backend)
        self.metrics = Metrics(placement=self.ledger.counts if self.ledger is not None else None)
        # The performance sampler and the hardware document (`/api/performance`, `/api/hardware`).
        self.host = HostService(config, self.gpu_backend, self.endpoint, self.metrics.registry)
        self.swap_log = SwapLog(self.instance, self.endpoint)
        publisher = StatePublisher(self.endpoint)
        phases = Phases(self.metrics, self.swap_log, publisher)
        self.lifecycle = Lifecycle(
            self.circus,
            self.endpoints.log_dir,
            gpu_backend=self.gpu_backend,
            gpu_release_timeout=float(os.environ.get(GPU_RELEASE_ENV) or GPU_RELEASE_TIMEOUT),
            asleep_dir=self.endpoints.asleep_dir,
            lingering_start_wait=float(
                os.environ.get(LINGERING_START_WAIT_ENV) or ports.START_WAIT
            ),
            shutdown_grace=shutdown_grace,
            echo_output=config.models_to_stdout,
            on_phase=phases.record,
        )
        lifecycle = self.lifecycle
        # The models' saved conversation caches (`kvCache`): the files of definitions gone are
        # removed now and at each reload.
        self.kv = KvSlots()
        self.kv.reconfigure(config)
        self.exits = ExitWatch(lifecycle.watchers, self._exited)
        self.busy = BusyChecks(self._busy_changed, session=lambda: lifecycle.session)
        board = self.busy.board
        self.learning = Learning(config, self._state_of)
        statuses = self.statuses = StatusView(
            self.registry,
            lifecycle,
            board,
            self.ledger,
            self.swap_log,
            learning=self.learning,
            kv=self.kv,
        )
        effects = DaemonEffects(
            lifecycle,
            self.registry,
            self.exits,
            publisher=publisher,
            status_of=statuses.of,
            phases=phases,
            metrics=self.metrics,
            swap_log=self.swap_log,
            board=board,
            ledger=self.ledger,
            republish=self._republish,
            kv=self.kv,
        )
        # The eviction policy is chosen for each config (here and at every reload) by `choose`.
        policies = functools.partial(
            choose,
            canonical_gpus=gpu.canonical_gpu_ids(self.gpu_backend.devices()),
            by_memory=self.ledger is not None,
        )
        readings = DaemonReadings(self.registry, self.busy, self.ledger, self.swap_log.estimates)
        scheduler: Scheduler[Running] = Scheduler(config, effects, readings, choose_policy=policies)
        self.scheduler = scheduler
        backend, ledger = self.gpu_backend, self.ledger
        self.observer = Observer(
            config,
            self.instance,
            self.endpoint,
            lambda: statuses.all(scheduler.states(), scheduler.config.models),
            lambda: gpu_ledger.gpu_devices(backend, ledger, scheduler.loaded()),
            metrics=self.metrics,
            before_scrape=self.host.before_scrape,
        )
        # The history a `store.path` kept from before a restart is learned from too.
        self.learning.records(self.observer.store.records, prefetch=False)
        self.observer.on_stored = self.learning.records
        counted = self.observer.on_records

        def answered(records: list[ActivityRecord]) -> None:
            if counted is not None:
                counted(records)
            effects.answered(records)

        self.observer.on_records = answered
        self.table = routing.routing_table(config, self.generation, self.endpoints.log_dir)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stop = asyncio.Event()
        # A reload and a profile switch replace the table: one at a time, so neither is lost.
        self.table_lock = asyncio.Lock()
        self.announcer = Announcer()
        self._register()

    def _register(self) -> None:
        on = self.endpoint.on
        Answers(self).register(on)
        self.observer.register(on)
        self.host.register(on)
        self.swap_log.register(on)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------------------ status

    def all_status(self) -> tuple[ModelStatus, ...]:
        return self.statuses.all(self.scheduler.states(), self.scheduler.config.models)

    def _state_of(self, model_id: str) -> ModelState | None:
        rec = self.scheduler.records.get(model_id)
        return rec.state if rec is not None else None

    def _busy_changed(self, model_id: str) -> None:
        """A busy reading changed (or a swap began or stopped waiting for the model): its status
        is published again, and the swaps that wait decide again."""
        rec = self.scheduler.records.get(model_id)
        if rec is not None:
            self._publish_state(rec)
        self.scheduler.readings_changed()

    def _republish(self, model_id: str) -> None:
        """What a swap to the model waits for changed: its status is published again."""
        rec = self.scheduler.records.get(model_id)
        if rec is not None:
            self._publish_state(rec)

    def _publish_state(self, rec: ModelRecord[Running]) -> None:
        st = self.statuses.of(rec, self.scheduler.config.models.get(rec.id))
        self.endpoint.publish_nowait(
            lambda seq: StateChanged(instance=self.instance, seq=seq, status=st)
        )

    async def publish_table(self) -> None:
        table = self.table
        await self.endpoint.publish(
            lambda seq: TableChanged(instance=self.instance, seq=seq, table=table)
        )

    # ------------------------------------------------------------------------------- exits

    def _exited(self, model_id: str, pid: int, exit_code: int | None) -> None:
        if self.scheduler.process_exited(model_id, pid, exit_code):
            self.metrics.crashes.labels(model_id).inc()

    def pid_of(self, model_id: str) -> int | None:
        rec = self.scheduler.records.get(model_id)
        return rec.handle.pid if rec is not None and rec.handle is not None else None

    async def reload(self, why: str) -> reloading.Reloaded:
        """Read the config file again and switch to it (`swapd reload`, SIGHUP, --watch-config).
        Raises DaemonError, after logging the whole report, when the file cannot be used: the
        old config keeps serving."""
        async with self.table_lock:
            result = await reloading.apply_logged(
                self.scheduler, self.config_path, self.gpu_backend, why
            )
            self.lifecycle.reconfigure(result.config)
            self.kv.reconfigure(result.config)
            self.generation += 1
            self.observer.reconfigure(result.config)
            self.learning.reconfigure(result.config)
            self.host.reconfigure(result.config)
            self.table = routing.routing_table(
                result.config, self.generation, self.endpoints.log_dir
            )
            await self.publish_table()
            for rec in self.scheduler.states():
                self._publish_state(rec)
            log.info(
                "config reloaded (generation %d); stopped: %s; start restarted: %s",
                self.generation,
                result.stopped,
                result.restarted,
            )
        return result

    def _reload_soon(self, why: str) -> None:
        self.spawn(reloading.quietly(self.reload(why)))

    # ------------------------------------------------------------------------------- loops

    async def tick_loop(self) -> None:
        await chores.tick_loop(
            self.scheduler, self.registry, self.busy, self.lifecycle, self.metrics, self.ledger,
            forget=self._forget_proxy, publish_state=self._publish_state, spawn=self.spawn,
            learned=self.learning,
        )  # fmt: skip

    def _forget_proxy(self, proxy_id: str) -> None:
        self.scheduler.claims.forget(proxy_id)  # its Readys will never be claimed
        self.announcer.forget(proxy_id)
        self.observer.forget(proxy_id)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        # circusd forwards its SIGHUP here (circusd.py) instead of restarting every process.
        loop.add_signal_handler(signal.SIGHUP, self._reload_soon, "SIGHUP")
        events = self.spawn(
            self.exits.follow_circus(self.endpoints.circus_pub, self.ctx, self.pid_of)
        )
        await reconcile.adopt(
            self.circus, self.lifecycle, self.scheduler.config, self.scheduler, self.exits.watch
        )
        self.endpoint.bind()
        log.info(
            "daemon %s up (pid %d, %d models, run dir %s)",
            self.instance,
            os.getpid(),
            len(self.scheduler.config.models),
            self.endpoints.run_dir,
        )
        await self.publish_table()
        loops = [self.spawn(self.endpoint.serve()), self.spawn(self.tick_loop()), events]
        loops.append(self.spawn(self.learning.run(self._republish)))
        loops.append(self.spawn(readiness.serve(self.registry.first_hello, self.circus)))
        if self.watch_config:
            watching = config_watch.watch(self.config_path, lambda: self.reload("file changed"))
            loops.append(self.spawn(watching))
        preloading.preload(self.endpoints.run_dir, self.scheduler, self.spawn, self.swap_log.wanted)
        await self._stop.wait()
        await self.shutdown()
        await self.busy.close()
        # The scheduler's own tasks too, while the sockets are still open (they publish).
        pending = [
            *loops,
            *self._tasks,
            *self.endpoint.tasks(),
            *self.exits.tasks(),
            *self.scheduler.tasks(),
        ]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def shutdown(self) -> None:
        """SIGTERM: what `policy/shutdown.py` decides, done (`stopping.py`)."""
        await stopping.stop(
            self.scheduler, self.lifecycle, self.registry, self.circus, self.exits,
            grace=self.shutdown_grace,
        )  # fmt: skip

    def close(self) -> None:
        self.observer.close()
        self.host.close()
        self.circus.close()
        self.endpoint.close()
        self.gpu_backend.close()
        # destroy, not term: term waits for every socket, and one left open would hang the exit.
        self.ctx.destroy(linger=0)
