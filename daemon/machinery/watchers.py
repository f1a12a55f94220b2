"""The model watchers in circusd: `add` and start one (the pid circus really started), `rm` it,
and the exit codes circus reports for processes it reaped.

circus's lifecycle commands take its arbiter-wide lock, so they go one at a time from here and are
retried while circus answers "already running" (`CircusClient.call_locked`). A swap's stop leaves
the `rm` until the next start has spawned its process (`defer`): the dead watcher's removal then
runs during that start's health check instead of before its `add`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ...ipc import watcher_names
from ..errors import CircusError
from . import pid_watch
from .circus_client import CircusClient

log = logging.getLogger("swapd.lifecycle")

# A deferred watcher removal runs once the next start has spawned, or after this when none comes.
REMOVE_DEFER_MAX = 0.5


class Watchers:
    def __init__(self, circus: CircusClient) -> None:
        self.circus = circus
        self._closing = False
        # circus lifecycle commands go one at a time (its arbiter lock refuses overlapping ones).
        self._lock = asyncio.Lock()
        # Watchers of stopped models whose `rm` waits for the next spawn (or REMOVE_DEFER_MAX),
        # and the `rm`s under way; both by model id. A start of the same id awaits its `rm` first.
        self._deferred: set[str] = set()
        self._removals: dict[str, asyncio.Task[None]] = {}
        self._defer_timer: asyncio.TimerHandle | None = None
        # Exit codes circus reported in `reap` events, for processes already reaped.
        self.reaped: dict[int, int] = {}
        self._reap_waiters: dict[int, asyncio.Future[int]] = {}

    @property
    def closing(self) -> bool:
        """Set while circusd shuts everything down: it drops every watcher itself and refuses
        `rm` until it is done (and it waits for this daemon first), so stops must not wait for
        it. Setting it drops the `rm`s under way: one that began just before circusd started
        shutting down (a model's exit cleaned up then) would be retried while the lock is busy,
        holding the daemon's exit up for the whole of `call_locked`'s patience."""
        return self._closing

    @closing.setter
    def closing(self, value: bool) -> None:
        self._closing = value
        if value:
            for task in list(self._removals.values()):
                task.cancel()

    async def close(self) -> None:
        if self._defer_timer is not None:
            self._defer_timer.cancel()
        self._deferred.clear()
        removals = list(self._removals.values())
        if removals:
            _, pending = await asyncio.wait(removals, timeout=2.0)
            for task in pending:
                task.cancel()

    async def command(self, command: str, **props: Any) -> dict[str, Any]:
        async with self._lock:
            return await self.circus.call_locked(command, **props)

    # ------------------------------------------------------------------------------- spawn

    async def spawn(
        self, model_id: str, cmd: tuple[str, ...], options: dict[str, Any]
    ) -> list[int]:
        """`add` the model's watcher and start it, in one command (circus's `add` with `start`,
        answered once the process is spawned: one round trip and one turn of circus's lock on
        a swap's path, where `add` then `start` took two); the pids circus started (empty: the
        spawn failed)."""
        # This model's own watcher may still be waiting for its `rm` (a quick swap back).
        if self.removal_pending(model_id):
            await self.remove(model_id)
        name = watcher_names.watcher_name(model_id)
        add = {
            "name": name,
            "cmd": cmd[0],
            "args": list(cmd[1:]),
            "options": options,
            "start": True,
            "waiting": True,
        }
        try:
            try:
                reply = await self.command("add", **add)
            except CircusError as exc:
                if "already exist" not in exc.reason:
                    raise
                # A watcher left behind by an earlier run (it died, or the daemon died mid-start).
                await self.remove(model_id)
                reply = await self.command("add", **add)
        finally:
            # The process is spawned: the removals that waited for it run during its health check.
            self._remove_deferred()
        return [int(p) for p in reply.get("started") or []]

    # ------------------------------------------------------------------------------ remove

    def removal_pending(self, model_id: str) -> bool:
        return model_id in self._deferred or model_id in self._removals

    async def remove(self, model_id: str) -> None:
        """`rm` the model's watcher (joining an `rm` of it already under way)."""
        if self.closing:
            return
        task = self._removal(model_id)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not task.cancelled() or (current is not None and current.cancelling()):
                raise  # the caller itself is being cancelled
            # Dropped by `closing`: circusd removes the watcher itself.

    def defer(self, model_id: str) -> None:
        """`rm` the watcher of a stopped model after the next spawn: a swap's start then does not
        queue its `add` and `start` behind it on circus's lock."""
        if self.closing:
            return
        self._deferred.add(model_id)
        if self._defer_timer is None:
            self._defer_timer = asyncio.get_running_loop().call_later(
                REMOVE_DEFER_MAX, self._remove_deferred
            )

    def _remove_deferred(self) -> None:
        if self._defer_timer is not None:
            self._defer_timer.cancel()
            self._defer_timer = None
        for model_id in list(self._deferred):
            self._removal(model_id)

    def _removal(self, model_id: str) -> asyncio.Task[None]:
        self._deferred.discard(model_id)
        task = self._removals.get(model_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._rm(model_id))
            self._removals[model_id] = task
            task.add_done_callback(lambda t: self._removal_done(model_id, t))
        return task

    def _removal_done(self, model_id: str, task: asyncio.Task[None]) -> None:
        if self._removals.get(model_id) is task:
            del self._removals[model_id]
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: removing its watcher failed: %r", model_id, task.exception())

    async def _rm(self, model_id: str) -> None:
        if self.closing:
            return
        with contextlib.suppress(CircusError):
            await self.command("rm", name=watcher_names.watcher_name(model_id), waiting=True)

    # -------------------------------------------------------------------------- exit codes

    def note_reaped(self, pid: int, exit_code: int) -> None:
        """circus's `reap` event: the exit code of a process circusd has reaped."""
        self.reaped[pid] = exit_code
        if len(self.reaped) > 1000:
            self.reaped.pop(next(iter(self.reaped)))
        waiter = self._reap_waiters.pop(pid, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(exit_code)

    async def exit_code(self, pid: int, timeout: float = 1.5) -> int | None:
        """The exit code of an exited process: from its zombie while circusd has not reaped it,
        else from circus's `reap` event (which comes within check_delay)."""
        code = pid_watch.zombie_exit_code(pid)
        if code is not None:
            return code
        if pid in self.reaped:
            return self.reaped[pid]
        waiter = self._reap_waiters.setdefault(pid, asyncio.get_running_loop().create_future())
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            return self.reaped.get(pid)
        finally:
            if self._reap_waiters.get(pid) is waiter and waiter.done():
                self._reap_waiters.pop(pid, None)
