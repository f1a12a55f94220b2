"""The daemon's owner (as circus's `arbiter.py` is to its `controller.py`): it builds the parts
and wires them. The machinery (`machinery/`: circus, processes, ports, GPUs), the policy
(`policy/`: the scheduler, eviction, TTL, the proxies' liveness) and the endpoint
(`endpoint.py`: sockets, dispatch, publishing) know nothing of each other; this module hands each
what it needs and answers each request type from the endpoint's dispatch table.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import psutil
import zmq.asyncio

from ..ipc.endpoints import Endpoints
from ..ipc.messages import (
    Activity,
    Drained,
    Ensure,
    Error,
    Hello,
    ModelStatus,
    Ok,
    Ready,
    Reload,
    Reply,
    Snapshot,
    SnapshotReply,
    StateChanged,
    Status,
    StatusReply,
    TableChanged,
    Unload,
)
from . import circus_config, placer, reloading, routing, status, stopping
from .busy_watch import BusyWatch
from .config import Config, ModelConfig
from .effects import DaemonEffects
from .endpoint import Endpoint
from .errors import DaemonError, EnsureError, InvalidConfig
from .machinery import gpu, ports, readiness, reconcile
from .machinery.circus_client import CircusClient
from .machinery.exit_watch import ExitWatch
from .machinery.lifecycle import GPU_RELEASE_TIMEOUT, Lifecycle
from .machinery.model_process import Running
from .observe.service import Observer
from .policy import shutdown, ttl
from .policy.proxies import ProxyRegistry
from .policy.records import ModelRecord
from .policy.scheduler import Scheduler

log = logging.getLogger("swapd.daemon")

TICK = 0.25
# The lingering ports are checked again this often (and before each start of their model).
LINGER_RECHECK = 2.0
# How many of each proxy's first heartbeats re-announce this daemon instance (see _announce).
ANNOUNCE_HELLOS = 3
# How long a stop waits for NVML to show the model's GPU memory released (default 10 s).
GPU_RELEASE_ENV = "SWAPD_GPU_RELEASE_TIMEOUT"
# How long a start waits for a port its model's last stop left in use (default 10 s).
LINGERING_START_WAIT_ENV = "SWAPD_LINGERING_START_WAIT"


class Daemon:
    def __init__(
        self,
        run_dir: Path,
        config_path: Path,
        config: Config,
        *,
        shutdown_grace: float = shutdown.DEFAULT_GRACE,
    ) -> None:
        self.endpoints = Endpoints(run_dir)
        self.config_path = config_path
        self.shutdown_grace = shutdown_grace
        self.instance = uuid.uuid4().hex[:12]
        self.started = time.time()
        self.generation = 1
        self.ctx = zmq.asyncio.Context()
        self.circus = CircusClient(self.endpoints.circus_ctl, context=self.ctx)
        self.gpu_backend = gpu.make_backend()
        gpu.verify_gpus(self.gpu_backend, config)
        self.lifecycle = Lifecycle(
            self.circus,
            self.endpoints.log_dir,
            gpu_backend=self.gpu_backend,
            gpu_release_timeout=float(os.environ.get(GPU_RELEASE_ENV) or GPU_RELEASE_TIMEOUT),
            lingering_start_wait=float(
                os.environ.get(LINGERING_START_WAIT_ENV) or ports.START_WAIT
            ),
            shutdown_grace=shutdown_grace,
            echo_output=lambda: self.scheduler.config.models_to_stdout,
        )
        self.registry = ProxyRegistry()
        self.endpoint = Endpoint(self.endpoints, self.instance, self.ctx)
        gpus = lambda: gpu.read_devices(self.gpu_backend)  # noqa: E731
        self.observer = Observer(config, self.instance, self.endpoint, self.all_status, gpus)
        self.metrics = self.observer.metrics
        self.exits = ExitWatch(self.lifecycle.watchers, self._exited)
        parts = (self.lifecycle, self.registry, self.endpoint, self.exits, self.model_status)
        effects = DaemonEffects(*parts, self.metrics)
        self.placer = placer.make_placer(self.gpu_backend, self.registry)
        self.scheduler: Scheduler[Running] = Scheduler(
            config,
            effects,
            canonical_gpus=gpu.canonical_gpu_ids(self.gpu_backend.devices()),
            placer=self.placer,
        )
        self.busy = BusyWatch(
            lambda: self.scheduler.config,
            self._busy_changed,
            session=lambda: self.lifecycle.session,
        )
        self.scheduler.hold = self.busy.hold
        if self.placer is not None:
            self.placer.busy_of = self.busy.board.busy
        self.table = routing.routing_table(config, self.generation, self.endpoints.log_dir)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stop = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._announced: dict[str, int] = {}
        self._register()

    def _register(self) -> None:
        on = self.endpoint.on
        on(Hello, self._hello)
        on(Activity, lambda _, m: self.registry.activity(m.proxy_id, m.model, m.in_flight, m.at))
        on(Drained, lambda _, m: self.registry.drained(m.proxy_id, m.model, m.epoch))
        self.observer.register(on)
        on(Snapshot, self._snapshot)
        on(Status, self._status)
        on(Ensure, self._ensure, spawn=True)
        on(Unload, self._unload, spawn=True)
        on(Reload, self._reload, spawn=True)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------------------ status

    def model_status(self, rec: ModelRecord[Running], model: ModelConfig | None) -> ModelStatus:
        st = status.model_status(
            rec,
            model,
            self.registry,
            self.lifecycle.lingering,
            self.lifecycle.gpu_lingering,
            busy=self.busy.board,
        )
        return self.placer.annotate(st, model) if self.placer is not None else st

    def all_status(self) -> tuple[ModelStatus, ...]:
        models = self.scheduler.config.models
        statuses = status.all_status(
            self.scheduler.states(),
            models,
            self.registry,
            self.lifecycle.lingering,
            self.lifecycle.gpu_lingering,
            self.busy.board,
        )
        if self.placer is None:
            return statuses
        return tuple(self.placer.annotate(st, models.get(st.model)) for st in statuses)

    def _busy_changed(self, model_id: str) -> None:
        rec = self.scheduler.records.get(model_id)
        if rec is not None:
            self._publish_state(rec)

    def _publish_state(self, rec: ModelRecord[Running]) -> None:
        st = self.model_status(rec, self.scheduler.config.models.get(rec.id))
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
        await self._announce(message.proxy_id, message.pid)

    async def _announce(self, proxy_id: str, pid: int) -> None:
        """Publish the table again on the first heartbeats of a proxy older than this daemon.

        Such a proxy followed a previous daemon, and learns that it was replaced only from an
        event carrying the new `instance`; the one published at bind time is lost while its SUB
        reconnects. Until it learns, it does not send again the Ensures the dead daemon never
        answered, so a restarted daemon with nothing else to publish would leave them waiting for
        ever. Its queued first Hello may arrive before its SUB is subscribed again, so the next
        heartbeats (1 s apart) repeat it. A proxy started after this daemon takes a snapshot.
        """
        count = self._announced.get(proxy_id, 0)
        if count >= ANNOUNCE_HELLOS:
            return
        self._announced[proxy_id] = count + 1
        if count == 0 and not _older_than_me(pid):
            self._announced[proxy_id] = ANNOUNCE_HELLOS
            return
        await self._publish_table()

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
            devices = tuple(await gpu.read_devices(self.gpu_backend))
        except Exception as exc:
            log.warning("GPU inventory failed: %s", exc)
            devices = ()
        if self.placer is not None:
            devices = tuple(self.placer.gpu_view(devices, self.scheduler.loaded()))
        reply = StatusReply(
            id=message.id,
            instance=self.instance,
            pid=os.getpid(),
            uptime=time.time() - self.started,
            models=self.all_status(),
            gpus=devices,
            gpu_backend=self.gpu_backend.name,
            received=dict(self.endpoint.received),
        )
        await self.endpoint.reply(identity, reply)

    async def _ensure(self, identity: bytes, message: Ensure) -> None:
        self.registry.seen(message.proxy_id)
        try:
            with self.metrics.waiting_for(message.model):
                handle = await self.scheduler.ensure(message.model)
        except EnsureError as exc:
            reply: Reply = _error(message.id, exc)
        except Exception as exc:
            log.exception("ensure %s failed", message.model)
            reply = Error(
                id=message.id, status=500, code="internal", message=f"{type(exc).__name__}: {exc}"
            )
        else:
            model = self.scheduler.config.resolve(message.model)
            model_id = model.id if model else message.model
            self.registry.served(model_id)
            reply = Ready(id=message.id, model=model_id, upstream=handle.upstream)
        await self.endpoint.reply(identity, reply)

    async def _unload(self, identity: bytes, message: Unload) -> None:
        try:
            stopped = await self.scheduler.unload(message.model)
        except EnsureError as exc:
            reply: Reply = _error(message.id, exc, with_tail=False)
        else:
            text = f"unloaded {', '.join(stopped)}" if stopped else "nothing to unload"
            reply = Ok(id=message.id, message=text)
        await self.endpoint.reply(identity, reply)

    async def _reload(self, identity: bytes, message: Reload) -> None:
        async with self._reload_lock:
            try:
                result = await reloading.apply(self.scheduler, self.config_path, self.gpu_backend)
            except Exception as exc:
                log.error("reload rejected, the old config stays: %s", exc)
                if not isinstance(exc, DaemonError):
                    exc = InvalidConfig(f"{type(exc).__name__}: {exc}")
                await self.endpoint.reply(identity, _error(message.id, exc, with_tail=False))
                return
            self.generation += 1
            self.observer.reconfigure(result.config)
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
        text = reloading.report(self.config_path, result)
        await self.endpoint.reply(identity, Ok(id=message.id, message=text))

    # ------------------------------------------------------------------------------- loops

    async def tick_loop(self) -> None:
        """TTL unloads, silent proxies forgotten, lingering ports checked again."""
        last_recheck = last_sample = 0.0
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(TICK)
            if self.placer is not None and loop.time() - last_sample >= placer.SAMPLE_EVERY:
                last_sample = loop.time()
                for model_id in await self.placer.sample(self.scheduler.occupants()):
                    self._publish_state(self.scheduler.record(model_id))
            for gone in self.registry.expire():
                self._announced.pop(gone, None)
                self.observer.forget(gone)
            config = self.scheduler.config
            records = list(self.scheduler.records.values())
            self.busy.tick(records, config, self.registry)
            for model_id in ttl.due(records, config, self.registry, held=self.busy.held):
                model = config.models.get(model_id)
                log.info("%s: unloading, TTL of %ss reached", model_id, model.ttl if model else "?")
                self.metrics.ttl_unloads.labels(model_id).inc()
                self.spawn(self.scheduler.stop(model_id, "ttl expired"))
            if self.lifecycle.lingering and loop.time() - last_recheck >= LINGER_RECHECK:
                last_recheck = loop.time()
                for model_id in self.lifecycle.recheck_lingering():
                    self._publish_state(self.scheduler.record(model_id))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
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
        loops.append(self.spawn(readiness.serve(self.registry.first_hello, self.circus)))
        self._preload()
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

    def _preload(self) -> None:
        """`hooks.on_startup.preload`, once per swapd start: not again when circusd restarts the
        daemon (the new daemon adopted what runs, maybe a model the user loaded since)."""
        marker = self.endpoints.run_dir / circus_config.PRELOADED_FILE
        if marker.exists():
            if self.scheduler.config.preload:
                log.info("preload skipped: it ran when this swapd started (daemon restarted)")
            return
        try:
            marker.touch(mode=0o600)
        except OSError as exc:
            log.warning("cannot write %s (%s): a restarted daemon would preload again", marker, exc)
        for model_id in self.scheduler.config.preload:
            self.spawn(self._preload_one(model_id))

    async def _preload_one(self, model_id: str) -> None:
        try:
            await self.scheduler.ensure(model_id)
        except EnsureError as exc:
            log.error("preload of %s failed: %s", model_id, exc.message)

    async def shutdown(self) -> None:
        """SIGTERM: what `policy/shutdown.py` decides, done (`stopping.py`)."""
        await stopping.stop(
            self.scheduler, self.lifecycle, self.registry, self.circus, self.exits,
            grace=self.shutdown_grace,
        )  # fmt: skip

    def close(self) -> None:
        self.observer.close()
        self.circus.close()
        self.endpoint.close()
        self.gpu_backend.close()
        # destroy, not term: term waits for every socket, and one left open would hang the exit.
        self.ctx.destroy(linger=0)


def _error(request_id: int, exc: DaemonError, *, with_tail: bool = True) -> Error:
    return Error(
        id=request_id,
        status=exc.status,
        code=exc.code,
        message=exc.message,
        log_tail=exc.log_tail if with_tail else (),
    )


def _older_than_me(pid: int) -> bool:
    """Whether process `pid` was started before this one (True when that cannot be told)."""
    try:
        return bool(psutil.Process(pid).create_time() < psutil.Process().create_time())
    except psutil.Error:
        return True
