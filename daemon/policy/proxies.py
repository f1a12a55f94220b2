"""What the daemon knows about the proxies: who is alive (heartbeats), how many requests each has
in flight per model and when each model was last used (activity casts), the ignored websockets
each has open per model (an open tab), and the drain acks."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ...ipc.timings import HEARTBEAT_GRACE, REPORT_GRACE, SILENT_AFTER


@dataclass
class ProxyInfo:
    proxy_id: str
    pid: int = 0
    last_seen: float = 0.0  # monotonic
    in_flight: dict[str, int] = field(default_factory=dict)
    websockets: dict[str, int] = field(default_factory=dict)  # model -> ignored websockets open
    drained: dict[str, int] = field(default_factory=dict)  # model -> highest acked epoch


class ProxyRegistry:
    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        silent_after: float = SILENT_AFTER,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock
        self.wall = wall
        self.silent_after = silent_after
        self.started = clock()
        self.proxies: dict[str, ProxyInfo] = {}
        self.last_activity: dict[str, float] = {}  # model -> wall clock (the report's `at`)
        self.last_report: dict[str, float] = {}  # model -> wall clock when a report came in
        # model -> wall clock of the last report while one of its websockets was open (or of the
        # one that said the last closed): an asleep model's `stopAfter` counts from it.
        self.last_socket: dict[str, float] = {}
        # model -> (pid of the run it was asked for, seconds): a request's keep_alive in place of
        # the model's ttl for that run (`KeepAlive`; `ttl.py` reads it).
        self.keep_alive: dict[str, tuple[int, float | None]] = {}
        self._epochs: dict[str, int] = {}
        self._changed = asyncio.Event()
        self.first_hello = asyncio.Event()

    def _seen(self, proxy_id: str) -> ProxyInfo:
        info = self.proxies.get(proxy_id)
        if info is None:
            info = self.proxies[proxy_id] = ProxyInfo(proxy_id)
        info.last_seen = self.clock()
        return info

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def seen(self, proxy_id: str) -> None:
        """Any message from a proxy (an Ensure, too) shows it is alive."""
        if proxy_id:
            self._seen(proxy_id)

    def hello(self, proxy_id: str, pid: int) -> None:
        self._seen(proxy_id).pid = pid
        self.first_hello.set()
        self._notify()

    def activity(
        self, proxy_id: str, model: str, in_flight: int, at: float, websockets: int = 0
    ) -> None:
        info = self._seen(proxy_id)
        info.in_flight[model] = max(0, in_flight)
        now = self.wall()
        if websockets > 0 or info.websockets.get(model, 0) > 0:
            self.last_socket[model] = now
        info.websockets[model] = max(0, websockets)
        # TTL counts from when the activity happened (`at`), not from when the report came in.
        self.last_activity[model] = max(self.last_activity.get(model, 0.0), min(at, now))
        self.last_report[model] = now
        self._notify()

    def keep(self, proxy_id: str, model: str, pid: int, seconds: float | None) -> None:
        """A request asked that the run `pid` of `model` stay loaded `seconds` once idle (from
        `proxy_id`; "": the daemon, for an unload that waits until the model is idle)."""
        if proxy_id:
            self._seen(proxy_id)
        if seconds is None:
            self.keep_alive.pop(model, None)
        else:
            self.keep_alive[model] = (pid, seconds)
        self._notify()

    def kept(self, model: str, pid: int | None) -> float | None:
        """The keep_alive a request set for the run `pid` of `model`, if any."""
        found = self.keep_alive.get(model)
        return found[1] if found is not None and found[0] == pid else None

    def served(self, model: str) -> None:
        """The daemon answered an Ensure with Ready: a request for it is about to start."""
        self.last_report[model] = self.wall()

    def drained(self, proxy_id: str, model: str, epoch: int) -> None:
        info = self._seen(proxy_id)
        info.drained[model] = max(info.drained.get(model, 0), epoch)
        info.in_flight[model] = 0
        self._notify()

    def live(self) -> list[ProxyInfo]:
        horizon = self.clock() - self.silent_after
        return [p for p in self.proxies.values() if p.last_seen >= horizon]

    def expire(self) -> list[str]:
        """Forget silent proxies; returns their ids."""
        horizon = self.clock() - self.silent_after
        gone = [pid for pid, p in self.proxies.items() if p.last_seen < horizon]
        for pid in gone:
            del self.proxies[pid]
        if gone:
            self._notify()
        return gone

    def in_flight(self, model: str) -> int:
        return sum(p.in_flight.get(model, 0) for p in self.live())

    def websockets(self, model: str) -> int:
        """The ignored websockets the live proxies have open to `model`."""
        return sum(p.websockets.get(model, 0) for p in self.live())

    def next_epoch(self, model: str) -> int:
        epoch = self._epochs.get(model, 0) + 1
        self._epochs[model] = epoch
        return epoch

    async def drain(
        self,
        model: str,
        publish: Callable[[int], Awaitable[None] | None],
        tick: float = 0.25,
        republish: float = 1.0,
    ) -> int:
        """Publish `Draining(model, epoch)` via `publish(epoch)`; return once every proxy alive at
        that moment acked it or went silent. No timeout: a long stream is never cut."""
        epoch = self.next_epoch(model)
        early = self.started + HEARTBEAT_GRACE - self.clock()
        if early > 0:
            await asyncio.sleep(early)
        waiting = {p.proxy_id for p in self.live()}
        published = -1.0
        while True:
            if self.clock() - published >= republish:
                # Again now and then: a proxy that missed the broadcast (or restarted) hears it.
                published = self.clock()
                result = publish(epoch)
                if result is not None:
                    await result
            live = {p.proxy_id for p in self.live()}
            pending = {
                pid for pid in waiting & live if self.proxies[pid].drained.get(model, 0) < epoch
            }
            if not pending:
                return epoch
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), tick)
            except TimeoutError:
                pass

    def busy(self) -> bool:
        """Whether some live proxy has a request in flight, for any model."""
        return any(n > 0 for p in self.live() for n in p.in_flight.values())

    async def wait_idle(self, timeout: float, tick: float = 0.25) -> bool:
        """Until no live proxy has a request in flight (True), or `timeout` passed (False).

        A request that began may reach the daemon's counts up to a report interval late, so
        "idle" also needs REPORT_GRACE to have passed since the last report or Ready reply."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (
            self.busy() or self.wall() - max(self.last_report.values(), default=0.0) < REPORT_GRACE
        ):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(tick, remaining))
        return True
