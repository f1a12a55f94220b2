"""The daemon's answer to each request type a proxy or the `swapd` CLI sends (`Hello`, `Activity`,
`Ensure`, `Unload`, `Sleep`, `Reload`, `SetProfile`, ...), registered on the endpoint's dispatch
table. The parts each answer uses are the daemon's (`supervisor.Daemon`, the wiring).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..ipc.causes import StartCause
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
    Status,
    StatusReply,
    Unload,
)
from ..ipc.states import ModelState
from . import gpu_ledger, reloading, routing
from .errors import DaemonError, EnsureError, error_reply
from .policy import names, ttl

if TYPE_CHECKING:
    from .supervisor import Daemon

log = logging.getLogger("swapd.daemon")


class Answers:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        # The Ensures under way, by connection and id: a `GaveUp` ends its wait.
        self._ensures: dict[tuple[bytes, int], asyncio.Task[Any]] = {}

    def register(self, on: Callable[..., None]) -> None:
        """Its messages in the endpoint's dispatch table."""
        on(Hello, self._hello)
        on(Activity, self._activity)
        registry = self.daemon.registry
        on(Drained, lambda _, m: registry.drained(m.proxy_id, m.model, m.epoch))
        on(KeepAlive, self._keep_alive)
        on(Snapshot, self._snapshot)
        on(Status, self._status)
        on(Ensure, self._ensure, spawn=True)
        on(GaveUp, self._gave_up)
        on(Unload, self._unload, spawn=True)
        on(Sleep, self._sleep, spawn=True)
        on(Reload, self._reload, spawn=True)
        on(SetProfile, self._set_profile, spawn=True)

    async def _hello(self, _identity: bytes, message: Hello) -> None:
        self.daemon.registry.hello(message.proxy_id, message.pid)
        self.daemon.observer.watching(message.proxy_id, message.watching)
        if self.daemon.announcer.due(message.proxy_id, message.pid):
            await self.daemon.publish_table()

    def _activity(self, _identity: bytes, message: Activity) -> None:
        registry = self.daemon.registry
        busy = registry.in_flight(message.model) > 0
        # The count first: a claimed Ready that was admitted is in flight from the same message.
        registry.activity(
            message.proxy_id, message.model, message.in_flight, message.at, message.websockets
        )
        if busy and registry.in_flight(message.model) == 0:
            # Its last request ended: a swap that serves its queue first (collation) goes now,
            # not at its next look.
            self.daemon.scheduler.readings_changed()
        if message.claimed:
            self.daemon.scheduler.claimed(message.model, message.proxy_id, message.claimed)

    async def _keep_alive(self, _identity: bytes, message: KeepAlive) -> None:
        pid = self.daemon.pid_of(message.model)
        if pid is not None:  # not running (any more): nothing to keep
            self.daemon.registry.keep(message.proxy_id, message.model, pid, message.seconds)

    async def _snapshot(self, identity: bytes, message: Snapshot) -> None:
        await self.daemon.endpoint.reply(
            identity,
            SnapshotReply(
                id=message.id,
                instance=self.daemon.instance,
                seq=self.daemon.endpoint.seq,
                table=self.daemon.table,
                models=self.daemon.all_status(),
                in_flight=tuple(self.daemon.observer.in_flight.values()),
            ),
        )

    async def _status(self, identity: bytes, message: Status) -> None:
        try:
            live = self.daemon.scheduler.loaded()
            devices = tuple(
                await gpu_ledger.gpu_devices(self.daemon.gpu_backend, self.daemon.ledger, live)
            )
        except Exception as exc:
            log.warning("GPU inventory failed: %s", exc)
            devices = ()
        reply = StatusReply(
            id=message.id,
            instance=self.daemon.instance,
            pid=os.getpid(),
            uptime=time.time() - self.daemon.started,
            models=self.daemon.all_status(),
            gpus=devices,
            gpu_backend=self.daemon.gpu_backend.name,
            received=dict(self.daemon.endpoint.received),
            watching=dict(self.daemon.observer.watchers),
            performance=self.daemon.host.figures(),
        )
        await self.daemon.endpoint.reply(identity, reply)

    def _gave_up(self, identity: bytes, message: GaveUp) -> None:
        """The request behind an Ensure under way gave up: its wait ends here (no reply), so the
        swap it waited for counts one waiter less."""
        task = self._ensures.get((identity, message.id))
        if task is not None:
            task.cancel()

    async def _ensure(self, identity: bytes, message: Ensure) -> None:
        self.daemon.registry.seen(message.proxy_id)
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
            model_id = names.resolve(self.daemon.scheduler.config, message.model).id
            self.daemon.swap_log.wanted(model_id, StartCause(message.cause))
            # A request's proxy claims the Ready (`Activity.claimed`); a load's admits nothing.
            claimant = message.proxy_id if message.cause == "request" else ""
            with self.daemon.metrics.waiting_for(model_id):
                handle = await self.daemon.scheduler.ensure(model_id, claimant, waits=message.waits)
        except EnsureError as exc:
            reply: Reply = error_reply(message.id, exc)
        except Exception as exc:
            log.exception("ensure %s failed", message.model)
            reply = Error(
                id=message.id, status=500, code="internal", message=f"{type(exc).__name__}: {exc}"
            )
        else:
            self.daemon.registry.served(model_id)
            reply = Ready(id=message.id, model=model_id, upstream=handle.upstream)
        await self.daemon.endpoint.reply(identity, reply)

    async def _unload(self, identity: bytes, message: Unload) -> None:
        try:
            model_id = None
            if message.model is not None:
                model_id = names.id_of(self.daemon.scheduler.config, message.model)
            if message.unless_in_use and model_id is not None and self._keep_zero(model_id):
                await self.daemon.endpoint.reply(
                    identity, Ok(id=message.id, message=f"{model_id} is in use: left loaded")
                )
                return
            with self.daemon.kv.skipping(message.now, model_id):
                stopped = await self.daemon.scheduler.unload(model_id)
        except EnsureError as exc:
            reply: Reply = error_reply(message.id, exc, with_tail=False)
        else:
            text = f"unloaded {', '.join(stopped)}" if stopped else "nothing to unload"
            reply = Ok(id=message.id, message=text)
        await self.daemon.endpoint.reply(identity, reply)

    def _keep_zero(self, model_id: str) -> bool:
        """An unload nobody waits for (Ollama's `keep_alive: 0`), of a model in use: True when it
        is left loaded. A ready one unloads once it is no longer in use, as a request's
        `keep_alive: 0` has it; one starting or waking for requests that wait for it is left to
        serve them. False: not in use, stopped now as any unload."""
        rec = self.daemon.scheduler.records.get(model_id)
        if rec is None:
            return False
        if rec.state in (ModelState.STARTING, ModelState.WAKING):
            swap = self.daemon.scheduler.swaps.get(model_id)
            return swap is not None and swap.watchers > 0
        registry = self.daemon.registry
        if rec.handle is None or rec.state != ModelState.READY:
            return False
        if not ttl.in_use(rec, registry, self.daemon.busy.board.held(model_id)):
            return False
        registry.keep("", model_id, rec.handle.pid, 0.0)
        return True

    async def _sleep(self, identity: bytes, message: Sleep) -> None:
        try:
            model_id = names.id_of(self.daemon.scheduler.config, message.model)
            state = await self.daemon.scheduler.sleep(model_id)
        except EnsureError as exc:
            reply: Reply = error_reply(message.id, exc, with_tail=False)
        else:
            reply = Ok(id=message.id, message=state)
        await self.daemon.endpoint.reply(identity, reply)

    async def _reload(self, identity: bytes, message: Reload) -> None:
        try:
            result = await self.daemon.reload("swapd reload")
        except DaemonError as exc:
            await self.daemon.endpoint.reply(
                identity, error_reply(message.id, exc, with_tail=False)
            )
            return
        text = reloading.report(self.daemon.config_path, result)
        await self.daemon.endpoint.reply(identity, Ok(id=message.id, message=text))

    async def _set_profile(self, identity: bytes, message: SetProfile) -> None:
        # After a reload under way (which may take as long as its stops): the switch applies to
        # the table that reload makes, or is refused when the new config lacks the profile.
        async with self.daemon.table_lock:
            table = routing.with_profile(
                self.daemon.table, message.name, self.daemon.generation + 1
            )
            if isinstance(table, str):
                reply: Reply = Error(id=message.id, status=404, code="not_found", message=table)
            else:
                if table is not self.daemon.table:
                    self.daemon.generation, self.daemon.table = table.generation, table
                    log.info("active profile changed to %r", message.name)
                    await self.daemon.publish_table()
                reply = Ok(id=message.id, message=message.name or "")
        await self.daemon.endpoint.reply(identity, reply)
