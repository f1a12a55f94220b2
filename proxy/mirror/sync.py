"""`StateSync`: keeps the proxy's `ProxyState` in step with the daemon.

SUB to the daemon's events, a `Snapshot` to start from, events applied in `seq` order; a gap, a new
daemon `instance` or a (re)connect of the event socket triggers a fresh snapshot. It also sends the
`Hello` heartbeat. Whoever must act on what it applies listens to the mirror (`changes.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import zmq
import zmq.asyncio

from ...ipc import codec
from ...ipc.messages import Snapshot, SnapshotReply
from ...ipc.timings import HEARTBEAT_S
from .link import DaemonLink
from .state import ProxyState

log = logging.getLogger(__name__)


class StateSync:
    """Keeps a `ProxyState` in step with the daemon (see the module docstring)."""

    def __init__(
        self,
        state: ProxyState,
        link: DaemonLink,
        events_endpoint: str,
        *,
        context: zmq.asyncio.Context,
    ) -> None:
        self._state = state
        self._link = link
        self._sub = context.socket(zmq.SUB)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.setsockopt(zmq.SUBSCRIBE, b"")
        # Events published while the SUB is not connected are lost without a trace (zmq's slow
        # joiner: at start the daemon may not have bound yet, and a reconnect waits up to 100 ms).
        # A missed *last* event (say `ready`) would leave the mirror wrong until the next event, and
        # every request would take the slow `Ensure` path; so every (re)connect takes a snapshot.
        self._monitor = self._sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self._sub.connect(events_endpoint)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._sync_loop()), loop.create_task(self._heartbeat())]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._sub.disable_monitor()
        self._monitor.close(linger=0)
        self._sub.close(linger=0)

    async def _snapshot(self) -> None:
        delay = 0.05
        while True:
            try:
                reply = await self._link.request(lambda i: Snapshot(id=i), timeout=2.0)
            except Exception as exc:  # the daemon is not up yet, or restarting
                log.debug("snapshot failed (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            if isinstance(reply, SnapshotReply):
                self._state.apply_snapshot(reply)
                log.info(
                    "routing table generation %d from daemon %s (seq %d)",
                    reply.table.generation,
                    reply.instance,
                    reply.seq,
                )
                return
            log.warning("unexpected reply to Snapshot: %r", reply)
            await asyncio.sleep(delay)

    async def _sync_loop(self) -> None:
        # The mirror must never silently stop following the daemon: on any unexpected error, log
        # it and start over from a fresh snapshot.
        while True:
            try:
                await self._follow()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("following the daemon's events failed; resynchronising")
                await asyncio.sleep(0.5)

    async def _follow(self) -> None:
        state = self._state
        await self._snapshot()
        poller = zmq.asyncio.Poller()
        poller.register(self._sub, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        while True:
            ready = dict(await poller.poll())
            if self._monitor in ready:
                # Events already queued in the SUB are older than this snapshot or newer: the
                # seq checks below skip the former and apply the latter.
                await self._monitor.recv_multipart()
                await self._snapshot()
                continue
            if self._sub not in ready:
                continue
            data = await self._sub.recv()
            try:
                event = codec.decode_event(data)
            except codec.DecodeError as exc:
                log.warning("undecodable event from daemon: %s", exc)
                continue
            if event.instance != state.instance or event.seq > state.seq + 1:
                log.info("daemon restarted or events were missed; taking a new snapshot")
                await self._link.hello()
                await self._snapshot()
                continue
            if event.seq <= state.seq:
                continue  # already contained in the snapshot
            state.apply_event(event)

    async def _heartbeat(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self._link.hello()
            await asyncio.sleep(HEARTBEAT_S)
