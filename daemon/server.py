"""The daemon process (`python -m swapd.daemon.server --run-dir DIR --config FILE`), run by circusd
as the `swapd-daemon` watcher.

It owns the config and every model's lifecycle. Proxies and the `swapd` CLI talk to it over a
ROUTER (requests and casts) and listen on a PUB (routing table, state changes, drains); both are
`ipc://` files in the run directory, created 0600. It drives circusd over circusd's control socket
and learns about model exits from circusd's PUB and from pidfds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import psutil
import zmq
import zmq.asyncio

from ..ipc import codec, watcher_names
from ..ipc.endpoints import Endpoints
from ..ipc.messages import (
    Activity,
    Drained,
    Draining,
    Ensure,
    Error,
    Hello,
    LingeringProcess,
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
from . import (
    circus_config,
    eviction,
    gpu,
    lifecycle,
    notify,
    pid_watch,
    reconcile,
    routing,
    ttl,
)
from .circus_client import CircusClient, CircusError, CircusUnavailable
from .circus_events import CircusEvents
from .config import Config, ModelConfig
from .proxies import ProxyRegistry
from .scheduler import EnsureError, ModelRecord, Scheduler

log = logging.getLogger("swapd.daemon")

TTL_TICK = 0.25
# How many of each proxy's first heartbeats re-announce this daemon instance (see _announce).
ANNOUNCE_HELLOS = 3
WATCHDOG_DEFAULT = 10.0
# A daemon that cannot start (its config file became invalid) exits after this long.
RETRY_DELAY = 5.0
# How long a stop waits for NVML to show the model's GPU memory released (default 10 s).
GPU_RELEASE_ENV = "SWAPD_GPU_RELEASE_TIMEOUT"


def load(path: Path) -> Config:
    from .config import load_config

    return load_config(path)


class DaemonEffects:
    """What the scheduler asks of the world, done by the daemon's process machinery."""

    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon

    async def start(self, model: ModelConfig) -> lifecycle.Running:
        self.d.lingering.pop(model.id, None)
        running = await self.d.lifecycle.start(model)
        self.d.watch_exit(model.id, running.pid)
        return running

    async def drain(self, model_id: str) -> None:
        async def publish(epoch: int) -> None:
            await self.d.publish(
                lambda seq: Draining(instance=self.d.instance, seq=seq, model=model_id, epoch=epoch)
            )

        await self.d.registry.drain(model_id, publish)

    async def stop(self, model_id: str, handle: Any, model: ModelConfig | None) -> None:
        self.d.unwatch_exit(model_id)
        if handle is None:
            await self.d.lifecycle.remove_watcher(model_id)
            return
        # A swap starts its target right after: the watcher's `rm` waits until that has spawned.
        defer = self.d.scheduler.start_follows(model_id)
        lingering = await self.d.lifecycle.stop(handle, model, defer_remove=defer)
        if lingering:
            self.d.lingering[model_id] = lingering

    def evict_for(self, target: str, running: frozenset[str]) -> frozenset[str]:
        return eviction.evict_for(
            target, running, self.d.scheduler.config, canonical_gpus=self.d.canonical_gpus
        )

    def changed(self, record: ModelRecord) -> None:
        status = self.d.model_status(record)
        self.d.publish_nowait(
            lambda seq: StateChanged(instance=self.d.instance, seq=seq, status=status)
        )


class Daemon:
    def __init__(self, run_dir: Path, config_path: Path, config: Config) -> None:
        self.endpoints = Endpoints(run_dir)
        self.config_path = config_path
        self.instance = uuid.uuid4().hex[:12]
        self.started = time.time()
        self.seq = 0
        self.generation = 1
        self.received: Counter[str] = Counter()
        self.lingering: dict[str, tuple[LingeringProcess, ...]] = {}
        self.ctx = zmq.asyncio.Context()
        self.circus = CircusClient(self.endpoints.circus_ctl, context=self.ctx)
        self.gpu_backend = gpu.make_backend()
        gpu.verify_gpus(self.gpu_backend, config)
        self.canonical_gpus = gpu.canonical_gpu_ids(self.gpu_backend.devices())
        self.lifecycle = lifecycle.Lifecycle(
            self.circus,
            self.endpoints.log_dir,
            gpu_backend=self.gpu_backend,
            gpu_release_timeout=float(
                os.environ.get(GPU_RELEASE_ENV) or lifecycle.GPU_RELEASE_TIMEOUT
            ),
        )
        self.registry = ProxyRegistry()
        self.scheduler = Scheduler(config, DaemonEffects(self))
        self.table = routing.routing_table(config, self.generation, self.endpoints.log_dir)
        self.router: zmq.asyncio.Socket | None = None
        self.pub: zmq.asyncio.Socket | None = None
        self._exit_watches: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stop = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._announced: dict[str, int] = {}

    # -------------------------------------------------------------------------- publishing

    def _next_event(self, make: Any) -> bytes:
        self.seq += 1
        return codec.encode(make(self.seq))

    async def publish(self, make: Any) -> None:
        if self.pub is None:
            self.seq += 1
            return
        await self.pub.send(self._next_event(make))

    def publish_nowait(self, make: Any) -> None:
        # Encoded (and its seq taken) now, so events keep the order of the state changes.
        if self.pub is None:
            self.seq += 1
            return
        # A PUB send never blocks (at the high-water mark it drops), so no need to await it.
        self.pub.send(self._next_event(make))

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------------------ status

    def model_status(self, rec: ModelRecord, now: float | None = None) -> ModelStatus:
        config = self.scheduler.config
        model = config.models.get(rec.id)
        handle: lifecycle.Running | None = rec.handle
        return ModelStatus(
            model=rec.id,
            state=rec.state,
            upstream=handle.upstream if handle else (model.proxy if model else ""),
            pid=handle.pid if handle else None,
            port=handle.port if handle else (model.port if model else None),
            gpus=handle.gpus if handle else tuple(model.gpus or ()) if model else (),
            ttl=model.ttl if model else 0,
            since=rec.since,
            last_activity=self.registry.last_activity.get(rec.id, 0.0),
            ttl_left=ttl.ttl_left(rec, config, self.registry, now),
            reason=rec.reason,
            in_flight=self.registry.in_flight(rec.id),
            lingering=self.lingering.get(rec.id, ()),
        )

    def all_status(self) -> tuple[ModelStatus, ...]:
        now = time.time()
        return tuple(self.model_status(rec, now) for rec in self.scheduler.states())

    # --------------------------------------------------------------------- exit watching

    def watch_exit(self, model_id: str, pid: int) -> None:
        self.unwatch_exit(model_id)

        async def watch() -> None:
            await pid_watch.wait_exit(pid)
            code = await self.lifecycle.exit_code(pid)
            self.scheduler.process_exited(model_id, pid, code)

        self._exit_watches[model_id] = self.spawn(watch())

    def unwatch_exit(self, model_id: str) -> None:
        task = self._exit_watches.pop(model_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def circus_events(self) -> None:
        events = CircusEvents(self.endpoints.circus_pub, context=self.ctx)
        try:
            async for event in events:
                if event.event == "reap" and event.pid is not None:
                    if event.exit_code is not None:
                        self.lifecycle.note_reaped(event.pid, event.exit_code)
                    self.scheduler.process_exited(event.model, event.pid, event.exit_code)
                elif event.event == "stop":
                    rec = self.scheduler.records.get(event.model)
                    pid = getattr(rec.handle, "pid", None) if rec else None
                    if pid is not None and not pid_watch.is_alive(pid):
                        self.scheduler.process_exited(
                            event.model, pid, self.lifecycle.reaped.get(pid)
                        )
        finally:
            events.close()

    # ------------------------------------------------------------------------------ requests

    async def handle(self, identity: bytes, payload: bytes) -> None:
        try:
            message = codec.decode_inbound(payload)
        except codec.DecodeError as exc:
            self.received["invalid"] += 1
            request_id = _guess_id(payload)
            log.warning("malformed message (%d bytes): %s", len(payload), exc)
            if request_id is not None:
                await self.reply(
                    identity,
                    Error(
                        id=request_id,
                        status=400,
                        code="bad_request",
                        message=f"malformed or unknown message: {exc}",
                    ),
                )
            return
        self.received[type(message).__name__] += 1
        if isinstance(message, Hello):
            self.registry.hello(message.proxy_id, message.pid)
            await self._announce(message.proxy_id, message.pid)
        elif isinstance(message, Activity):
            self.registry.activity(message.proxy_id, message.model, message.in_flight, message.at)
        elif isinstance(message, Drained):
            self.registry.drained(message.proxy_id, message.model, message.epoch)
        elif isinstance(message, Snapshot):
            await self.reply(
                identity,
                SnapshotReply(
                    id=message.id,
                    instance=self.instance,
                    seq=self.seq,
                    table=self.table,
                    models=self.all_status(),
                ),
            )
        elif isinstance(message, Status):
            await self.reply(identity, await self.status_reply(message.id))
        elif isinstance(message, Ensure):
            self.registry.seen(message.proxy_id)
            self.spawn(self.ensure(identity, message))
        elif isinstance(message, Unload):
            self.spawn(self.unload(identity, message))
        elif isinstance(message, Reload):
            self.spawn(self.reload(identity, message))

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
        table = self.table
        await self.publish(lambda seq: TableChanged(instance=self.instance, seq=seq, table=table))

    async def reply(self, identity: bytes, reply: Reply) -> None:
        assert self.router is not None
        await self.router.send_multipart([identity, codec.encode(reply)])

    async def ensure(self, identity: bytes, message: Ensure) -> None:
        try:
            handle = await self.scheduler.ensure(message.model)
        except EnsureError as exc:
            reply: Reply = Error(
                id=message.id,
                status=exc.status,
                code=exc.code,
                message=exc.message,
                log_tail=exc.log_tail,
            )
        except Exception as exc:
            log.exception("ensure %s failed", message.model)
            reply = Error(
                id=message.id, status=500, code="internal", message=f"{type(exc).__name__}: {exc}"
            )
        else:
            model = self.scheduler.config.resolve(message.model)
            self.registry.served(model.id if model else message.model)
            reply = Ready(
                id=message.id, model=model.id if model else message.model, upstream=handle.upstream
            )
        await self.reply(identity, reply)

    async def unload(self, identity: bytes, message: Unload) -> None:
        try:
            stopped = await self.scheduler.unload(message.model)
        except EnsureError as exc:
            reply: Reply = Error(
                id=message.id, status=exc.status, code=exc.code, message=exc.message
            )
        else:
            text = f"unloaded {', '.join(stopped)}" if stopped else "nothing to unload"
            reply = Ok(id=message.id, message=text)
        await self.reply(identity, reply)

    async def status_reply(self, request_id: int) -> StatusReply:
        try:
            devices = tuple(await gpu.read_devices(self.gpu_backend))
        except Exception as exc:
            log.warning("GPU inventory failed: %s", exc)
            devices = ()
        return StatusReply(
            id=request_id,
            instance=self.instance,
            pid=os.getpid(),
            uptime=time.time() - self.started,
            models=self.all_status(),
            gpus=devices,
            gpu_backend=getattr(self.gpu_backend, "name", ""),
            received=dict(self.received),
        )

    async def reload(self, identity: bytes, message: Reload) -> None:
        async with self._reload_lock:
            try:
                text = await self.apply_reload()
            except Exception as exc:
                log.error("reload rejected, the old config stays: %s", exc)
                await self.reply(
                    identity,
                    Error(id=message.id, status=400, code="invalid_config", message=str(exc)),
                )
                return
        await self.reply(identity, Ok(id=message.id, message=text))

    async def apply_reload(self) -> str:
        new = await asyncio.to_thread(load, self.config_path)
        gpu.verify_gpus(self.gpu_backend, new)
        fresh = {mid: lifecycle.definition_hash(m) for mid, m in new.models.items()}
        changed = []
        for rec in list(self.scheduler.records.values()):
            handle: lifecycle.Running | None = rec.handle
            if handle is not None and fresh.get(rec.id) != handle.definition:
                changed.append(rec.id)

        def outdated(model: ModelConfig) -> bool:
            return fresh.get(model.id) != lifecycle.definition_hash(model)

        # Switch first, so every start from now on (a swap queued behind one of these stops, or
        # an aborted start going round again) uses the new definition; a stop uses the definition
        # the process was started with (its own cmdStop).
        restarted = await self.scheduler.reconfigure(new, changed, outdated)
        self.generation += 1
        self.table = routing.routing_table(new, self.generation, self.endpoints.log_dir)
        table = self.table
        await self.publish(lambda seq: TableChanged(instance=self.instance, seq=seq, table=table))
        for status in self.all_status():
            self.publish_nowait(
                lambda seq, st=status: StateChanged(instance=self.instance, seq=seq, status=st)
            )
        log.info(
            "config reloaded (generation %d); stopped: %s; start restarted: %s",
            self.generation,
            changed,
            restarted,
        )
        text = f"reloaded {self.config_path}"
        if changed:
            text += f"; stopped changed models: {', '.join(changed)}"
        if restarted:
            text += f"; restarted starts with the new definition: {', '.join(restarted)}"
        return text

    # ------------------------------------------------------------------------------ loops

    async def router_loop(self) -> None:
        assert self.router is not None
        while True:
            frames = await self.router.recv_multipart()
            if len(frames) < 2:
                continue
            try:
                await self.handle(frames[0], frames[-1])
            except Exception:
                log.exception("error handling a message")

    async def ttl_loop(self) -> None:
        while True:
            await asyncio.sleep(TTL_TICK)
            for gone in self.registry.expire():
                self._announced.pop(gone, None)
            config = self.scheduler.config
            for model_id in ttl.due(list(self.scheduler.records.values()), config, self.registry):
                model = config.models.get(model_id)
                log.info("%s: unloading, TTL of %ss reached", model_id, model.ttl if model else "?")
                self.spawn(self.scheduler.stop(model_id, "ttl expired"))

    async def readiness(self) -> None:
        await self.registry.first_hello.wait()
        notify.ready()
        notify.status(f"swapd: serving on {os.environ.get('SWAPD_LISTEN', '?')}")
        interval = notify.watchdog_interval()
        while True:
            await asyncio.sleep(interval or WATCHDOG_DEFAULT)
            try:
                await self.circus.call("status", timeout=5.0)
            except (CircusUnavailable, CircusError) as exc:
                log.error("circusd does not answer (%s): withholding WATCHDOG=1", exc)
                continue
            if interval:
                notify.watchdog()

    def bind(self) -> None:
        old = os.umask(0o177)
        try:
            self.router = self.ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            # A reconnecting DEALER that reuses an identity must not be refused.
            self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)
            self.router.bind(self.endpoints.daemon)
            self.pub = self.ctx.socket(zmq.PUB)
            self.pub.setsockopt(zmq.LINGER, 0)
            self.pub.setsockopt(zmq.SNDHWM, 100_000)
            self.pub.bind(self.endpoints.events)
        finally:
            os.umask(old)
        # circusd created its own sockets under whatever umask it was started with.
        for sock in (self.endpoints.circus_ctl, self.endpoints.circus_pub):
            with contextlib.suppress(OSError):
                os.chmod(sock.removeprefix("ipc://"), 0o600)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        events = self.spawn(self.circus_events())
        await reconcile.adopt(self)
        self.bind()
        log.info(
            "daemon %s up (pid %d, %d models, run dir %s)",
            self.instance,
            os.getpid(),
            len(self.scheduler.config.models),
            self.endpoints.run_dir,
        )
        table = self.table
        await self.publish(lambda seq: TableChanged(instance=self.instance, seq=seq, table=table))
        loops = [self.spawn(self.router_loop()), self.spawn(self.ttl_loop()), events]
        loops.append(self.spawn(self.readiness()))
        for model_id in self.scheduler.config.preload:
            self.spawn(self._preload(model_id))
        await self._stop.wait()
        await self.shutdown()
        # The scheduler's own tasks too, while the sockets are still open (they publish).
        pending = [*loops, *self._tasks, *self.scheduler.tasks()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _preload(self, model_id: str) -> None:
        try:
            await self.scheduler.ensure(model_id)
        except EnsureError as exc:
            log.error("preload of %s failed: %s", model_id, exc.message)

    async def shutdown(self) -> None:
        """SIGTERM. When circusd is stopping everything, answer the waiting Ensures with 503, abort
        the starts under way and run the cmdStop of every loaded model that has one (circus's
        signals do not reach a docker container). When only the daemon is being restarted, leave
        the models running (starting ones too) for the next daemon to adopt, and leave the waiting
        Ensures unanswered: the proxies send them again to the next daemon, which serves them."""
        notify.stopping()
        # circusd signals the model watchers before the daemon: a model whose client exited just
        # now is being cleaned up (its cmdStop included). That must finish before the daemon goes.
        under_way = self.scheduler.stops_under_way()
        loaded = [r for r in self.scheduler.records.values() if r.handle is not None]
        starting = [r for r in self.scheduler.records.values() if r.state == "starting"]
        if not loaded and not starting:
            await self.scheduler.shutdown()
            self.lifecycle.closing = True
            await asyncio.gather(*under_way, return_exceptions=True)
            return
        try:
            statuses = (await self.circus.call("status", timeout=2.0)).get("statuses", {})
        except (CircusUnavailable, CircusError):
            statuses = {}
        everything = (
            not statuses
            or any(
                statuses.get(name) not in ("active", None)
                for name in (circus_config.PROXY_WATCHER,)
            )
            or any(
                statuses.get(watcher_names.watcher_name(r.id)) not in ("active",) for r in loaded
            )
            # A start's watcher may not be added yet (None): that says nothing either way.
            or any(
                statuses.get(watcher_names.watcher_name(r.id)) not in ("active", None)
                for r in starting
            )
        )
        if not everything:
            # A start cancelled when the loop closes must leave its process to the next daemon.
            self.lifecycle.detached = True
            log.info("daemon stopping alone; %d models keep running", len(loaded) + len(starting))
            return
        await self.scheduler.shutdown()
        self.lifecycle.closing = True
        log.info(
            "circusd is shutting down: stopping %d models (%d starting)",
            len(loaded) + len(starting),
            len(starting),
        )
        await asyncio.gather(
            self.scheduler.abort_starts(),
            *(self._stop_on_shutdown(rec) for rec in loaded),
            *under_way,
            return_exceptions=True,
        )

    async def _stop_on_shutdown(self, rec: ModelRecord) -> None:
        model = rec.model or self.scheduler.config.models.get(rec.id)
        handle: lifecycle.Running = rec.handle
        if model is None or not model.cmd_stop:
            return  # circusd's SIGTERM/SIGKILL reaches it
        self.unwatch_exit(rec.id)
        await self.lifecycle.stop(handle, model, remove=False)

    def close(self) -> None:
        self.circus.close()
        for sock in (self.router, self.pub):
            if sock is not None:
                sock.close(linger=0)
        self.gpu_backend.close()
        # destroy, not term: term waits for every socket, and one left open would hang the exit.
        self.ctx.destroy(linger=0)


def _older_than_me(pid: int) -> bool:
    """Whether process `pid` was started before this one (True when that cannot be told)."""
    try:
        return bool(psutil.Process(pid).create_time() < psutil.Process().create_time())
    except psutil.Error:
        return True


def _guess_id(payload: bytes) -> int | None:
    """The `id` of an undecodable request, so its sender still gets an error reply."""
    with contextlib.suppress(Exception):
        raw = msgspec.msgpack.decode(payload)
        if isinstance(raw, dict) and isinstance(raw.get("id"), int):
            return int(raw["id"])
    return None


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m swapd.daemon.server", description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--log-level", default=os.environ.get("SWAPD_LOG_LEVEL", "INFO"))
    return parser.parse_args(argv)


async def _main(args: argparse.Namespace) -> int:
    try:
        config = await asyncio.to_thread(load, args.config)
        daemon = Daemon(args.run_dir, args.config, config)
    except Exception as exc:
        # `swapd run` checked the file, so it changed since (edited without `swapd reload`).
        # circusd restarts the daemon when it exits: do not turn that into a busy loop.
        log.error("cannot start with %s:\n%s\n(retrying in %gs)", args.config, exc, RETRY_DELAY)
        await asyncio.sleep(RETRY_DELAY)
        return 1
    try:
        await daemon.run()
    finally:
        await daemon.lifecycle.close()
        daemon.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s swapd-daemon[%(process)d] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(main())
