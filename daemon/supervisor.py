"""The daemon's owner (as circus's `arbiter.py` is to its `controller.py`): it builds the parts
and wires them. The machinery (`machinery/`: circus, processes, ports, GPUs), the policy
(`policy/`: the scheduler, eviction, TTL, the proxies' liveness) and the endpoint
(`endpoint.py`: sockets, dispatch, publishing) know nothing of each other; this module hands each
what it needs and answers each request type from the endpoint's dispatch table.
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
from ..ipc.causes import StartCause
from ..ipc.endpoints import Endpoints
from ..ipc.messages import (
    Activity,
    Drained,
    Ensure,
    Error,
    GaveUp,
    Hello,
    KeepAlive,
    Ok,
    Ready,
    Reload,
    Reply,
    SetProfile,
    Sleep,
    Snapshot,
    SnapshotReply,
    StateChanged,
    Status,
    StatusReply,
    TableChanged,
    Unload,
)
from ..ipc.model_status import ModelStatus
from ..ipc.states import ModelState
from . import chores, config_watch, gpu_ledger, preloading, reloading, routing, stopping
from .announcing import Announcer
from .busy_checks import BusyChecks
from .config import Config, ConfigSources
from .effects import DaemonEffects, Phases, StatePublisher
from .endpoint import Endpoint
from .errors import DaemonError, EnsureError, error_reply
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
from .policy import names, shutdown
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
        # The Ensures under way, by connection and id: a `GaveUp` ends its wait.
        self._ensures: dict[tuple[bytes, int], asyncio.Task[Any]] = {}
        # A reload and a profile switch replace the table: one at a time, so neither is lost.
        self._table_lock = asyncio.Lock()
        self.announcer = Announcer()
        self._register()

    def _register(self) -> None:
        on = self.endpoint.on
        on(Hello, self._hello)
        on(Activity, self._activity)
        on(Drained, lambda _, m: self.registry.drained(m.proxy_id, m.model, m.epoch))
        on(KeepAlive, self._keep_alive)
        self.observer.register(on)
        self.host.register(on)
        self.swap_log.register(on)
        on(Snapshot, self._snapshot)
        on(Status, self._status)
        on(Ensure, self._ensure, spawn=True)
        on(GaveUp, self._gave_up)
        on(Unload, self._unload, spawn=True)
        on(Sleep, self._sleep, spawn=True)
        on(Reload, self._reload, spawn=True)
        on(SetProfile, self._set_profile, spawn=True)

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

    async def _publish_table(self) -> None:
        table = self.table
        await self.endpoint.publish(
            lambda seq: TableChanged(instance=self.instance, seq=seq, table=table)
        )

    # ------------------------------------------------------------------------------- exits

    def _exited(self, model_id: str, pid: int, exit_code: int | None) -> None:
        if self.scheduler.process_exited(model_id, pid, exit_code):
            self.metrics.crashes.labels(model_id).inc()

    def _pid_of(self, model_id: str) -> int | None:
        rec = self.scheduler.records.get(model_id)
        return rec.handle.pid if rec is not None and rec.handle is not None else None

    # ---------------------------------------------------------------------------- requests

    async def _hello(self, _identity: bytes, message: Hello) -> None:
        self.registry.hello(message.proxy_id, message.pid)
        self.observer.watching(message.proxy_id, message.watching)
        if self.announcer.due(message.proxy_id, message.pid):
            await self._publish_table()

    def _activity(self, _identity: bytes, message: Activity) -> None:
        # The count first: a claimed Ready that was admitted is in flight from the same message.
        self.registry.activity(
            message.proxy_id, message.model, message.in_flight, message.at, message.websockets
        )
        if message.claimed:
            self.scheduler.claimed(message.model, message.proxy_id, message.claimed)

    async def _keep_alive(self, _identity: bytes, message: KeepAlive) -> None:
        pid = self._pid_of(message.model)
        if pid is not None:  # not running (any more): nothing to keep
            self.registry.keep(message.proxy_id, message.model, pid, message.seconds)

    async def _snapshot(self, identity: bytes, message: Snapshot) -> None:
        await self.endpoint.reply(
            identity,
            SnapshotReply(
                id=message.id,
                instance=self.instance,
                seq=self.endpoint.seq,
                table=self.table,
                models=self.all_status(),
                in_flight=tuple(self.observer.in_flight.values()),
            ),
        )

    async def _status(self, identity: bytes, message: Status) -> None:
        try:
            live = self.scheduler.loaded()
            devices = tuple(await gpu_ledger.gpu_devices(self.gpu_backend, self.ledger, live))
        except Exception as exc:
            log.warning("GPU inventory failed: %s", exc)
            devices = ()
        reply = StatusReply(
            id=message.id,
            instance=self.instance,
            pid=os.getpid(),
            uptime=time.time() - self.started,
            models=self.all_status(),
            gpus=devices,
            gpu_backend=self.gpu_backend.name,
            received=dict(self.endpoint.received),
            watching=dict(self.observer.watchers),
            performance=self.host.figures(),
        )
        await self.endpoint.reply(identity, reply)

    def _gave_up(self, identity: bytes, message: GaveUp) -> None:
        """The request behind an Ensure under way gave up: its wait ends here (no reply), so the
        swap it waited for counts one waiter less."""
        task = self._ensures.get((identity, message.id))
        if task is not None:
            task.cancel()

    async def _ensure(self, identity: bytes, message: Ensure) -> None:
        self.registry.seen(message.proxy_id)
        key = (identity, message.id)
        task = asyncio.current_task()
        if task is not None:
            self._ensures[key] = task
        try:
            await self._answer_ensure(identity, message)
        finally:
            self._ensures.pop(key, None)

    async def _answer_ensure(self, identity: bytes, message: Ensure) -> None:
        try:
            # The one place a request's name becomes a model id.
            model_id = names.resolve(self.scheduler.config, message.model).id
            self.swap_log.wanted(model_id, StartCause(message.cause))
            # A request's proxy claims the Ready (`Activity.claimed`); a load's admits nothing.
            claimant = message.proxy_id if message.cause == "request" else ""
            with self.metrics.waiting_for(model_id):
                handle = await self.scheduler.ensure(model_id, claimant, waits=message.waits)
        except EnsureError as exc:
            reply: Reply = error_reply(message.id, exc)
        except Exception as exc:
            log.exception("ensure %s failed", message.model)
            reply = Error(
                id=message.id, status=500, code="internal", message=f"{type(exc).__name__}: {exc}"
            )
        else:
            self.registry.served(model_id)
            reply = Ready(id=message.id, model=model_id, upstream=handle.upstream)
        await self.endpoint.reply(identity, reply)

    async def _unload(self, identity: bytes, message: Unload) -> None:
        try:
            model_id = None
            if message.model is not None:
                model_id = names.id_of(self.scheduler.config, message.model)
            with self.kv.skipping(message.now, model_id):
                stopped = await self.scheduler.unload(model_id)
        except EnsureError as exc:
            reply: Reply = error_reply(message.id, exc, with_tail=False)
        else:
            text = f"unloaded {', '.join(stopped)}" if stopped else "nothing to unload"
            reply = Ok(id=message.id, message=text)
        await self.endpoint.reply(identity, reply)

    async def _sleep(self, identity: bytes, message: Sleep) -> None:
        try:
            model_id = names.id_of(self.scheduler.config, message.model)
            state = await self.scheduler.sleep(model_id)
        except EnsureError as exc:
            reply: Reply = error_reply(message.id, exc, with_tail=False)
        else:
            reply = Ok(id=message.id, message=state)
        await self.endpoint.reply(identity, reply)

    async def _reload(self, identity: bytes, message: Reload) -> None:
        try:
            result = await self.reload("swapd reload")
        except DaemonError as exc:
            await self.endpoint.reply(identity, error_reply(message.id, exc, with_tail=False))
            return
        text = reloading.report(self.config_path, result)
        await self.endpoint.reply(identity, Ok(id=message.id, message=text))

    async def reload(self, why: str) -> reloading.Reloaded:
        """Read the config file again and switch to it (`swapd reload`, SIGHUP, --watch-config).
        Raises DaemonError, after logging the whole report, when the file cannot be used: the
        old config keeps serving."""
        async with self._table_lock:
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
            await self._publish_table()
            for rec in self.scheduler.states():
                self._publish_state(rec)
            log.info(
                "config reloaded (generation %d); stopped: %s; start restarted: %s",
                self.generation,
                result.stopped,
                result.restarted,
            )
        return result

    async def _set_profile(self, identity: bytes, message: SetProfile) -> None:
        # After a reload under way (which may take as long as its stops): the switch applies to
        # the table that reload makes, or is refused when the new config lacks the profile.
        async with self._table_lock:
            table = routing.with_profile(self.table, message.name, self.generation + 1)
            if isinstance(table, str):
                reply: Reply = Error(id=message.id, status=404, code="not_found", message=table)
            else:
                if table is not self.table:
                    self.generation, self.table = table.generation, table
                    log.info("active profile changed to %r", message.name)
                    await self._publish_table()
                reply = Ok(id=message.id, message=message.name or "")
        await self.endpoint.reply(identity, reply)

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
            self.exits.follow_circus(self.endpoints.circus_pub, self.ctx, self._pid_of)
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
        await self._publish_table()
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
