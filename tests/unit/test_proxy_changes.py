"""The mirror's one state-change channel (proxy/mirror/changes.py) and what listens to it:
every message the mirror applies is told once it holds it; admission acks drains and closes
ignored websockets through it; and a request whose `Ready` arrives before the events of the
model's new run is woken by them (no polling, no second `Ensure`), within a bound that ends in
a clear answer."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from swapd.ipc.messages import (
    Draining,
    Ready,
    SnapshotReply,
    StateChanged,
    TableChanged,
)
from swapd.ipc.model_status import ModelStatus
from swapd.ipc.routing_table import RouteModel, RoutingTable
from swapd.proxy import pipeline
from swapd.proxy.admission import Admission
from swapd.proxy.floor.account import Account
from swapd.proxy.floor.errors import Unavailable
from swapd.proxy.mirror.changes import Applied
from swapd.proxy.mirror.state import ProxyState
from swapd.proxy.observe.stats import Stats

_UPSTREAM = "http://127.0.0.1:5801"


def _table(*ids: str, generation: int = 1) -> RoutingTable:
    models = tuple(RouteModel(id=i, upstream=_UPSTREAM, concurrency_limit=10, ttl=0) for i in ids)
    return RoutingTable(generation=generation, models=models)


def _status(model: str, state: str, **kw: Any) -> ModelStatus:
    return ModelStatus(model=model, state=state, upstream=_UPSTREAM, **kw)  # type: ignore[arg-type]


class _Mirror:
    """A `ProxyState` fed as `StateSync` feeds it, one message of the daemon's at a time."""

    def __init__(self, *ids: str, state: str = "ready") -> None:
        self.state = ProxyState()
        self.seq = 1
        self.state.apply_snapshot(
            SnapshotReply(
                id=1,
                instance="i",
                seq=1,
                table=_table(*ids),
                models=tuple(_status(i, state) for i in ids),
            )
        )

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def status(self, model: str, state: str, **kw: Any) -> None:
        self.state.apply_event(
            StateChanged(instance="i", seq=self._next(), status=_status(model, state, **kw))
        )

    def drain(self, model: str, epoch: int) -> None:
        self.state.apply_event(Draining(instance="i", seq=self._next(), model=model, epoch=epoch))

    def table(self, *ids: str) -> None:
        self.state.apply_event(TableChanged(instance="i", seq=self._next(), table=_table(*ids)))


class _Link:
    """Stands in for `DaemonLink`'s DEALER socket to the daemon (the stack tests use the real
    one): each `ensure` is counted and answered by `answer`, which may change the mirror first
    (what the daemon's events do when they come before the reply)."""

    def __init__(self, answer: Any = None) -> None:
        self.ensures: list[str] = []
        self.drains: list[tuple[str, int]] = []
        # The Readys claimed, as the Activity casts tell the daemon: (model, in flight then).
        self.claims: list[tuple[str, int]] = []
        self.answer = answer
        self.asked = asyncio.Event()

    async def ensure(self, model: str) -> Ready:
        self.ensures.append(model)
        self.asked.set()
        if self.answer is not None:
            self.answer(len(self.ensures))
        return Ready(id=len(self.ensures), model=model, upstream=_UPSTREAM)

    def activity(
        self,
        model: str,
        in_flight: int,
        at: float | None = None,
        claimed: int = 0,
        websockets: int = 0,
    ) -> None:
        self.claims += [(model, in_flight)] * claimed

    def drained(self, model: str, epoch: int) -> None:
        self.drains.append((model, epoch))


def _context(mirror: _Mirror, link: _Link) -> Any:
    """What `pipeline._admit` reads of the `ProxyContext`, with the real mirror and admission."""
    return SimpleNamespace(
        state=mirror.state,
        link=link,
        admission=Admission(mirror.state, link),  # type: ignore[arg-type]
        loop=asyncio.get_running_loop(),
        stats=Stats(),
    )


# --------------------------------------------------------------------------------------------------
# the channel


async def test_each_applied_message_is_told_once_the_mirror_holds_it() -> None:
    mirror = _Mirror("a", "b")
    heard: list[tuple[str, list[tuple[str, str, str]], str | None]] = []

    def listener(applied: Applied) -> None:
        # What the mirror holds when the listener is told: the change is already in it.
        models = [(rt.id, old, rt.state) for rt, old in applied.models]
        draining = applied.draining
        heard.append((type(applied.message).__name__, models, draining and draining.id))

    mirror.state.changes.listen(listener)
    mirror.status("a", "ready", reason="same state, new reason")
    mirror.drain("a", 7)
    mirror.status("a", "stopping")
    mirror.table("a")  # b leaves the table: stopped as far as routing is concerned
    mirror.state.changes.forget(listener)
    mirror.status("a", "stopped")
    assert heard == [
        ("StateChanged", [("a", "ready", "ready")], None),
        ("Draining", [], "a"),
        ("StateChanged", [("a", "ready", "stopping")], None),
        ("TableChanged", [("b", "ready", "stopped")], None),
    ]
    assert mirror.state.runtimes["a"].drain_epoch == 7


async def test_a_failing_listener_keeps_no_other_from_hearing() -> None:
    mirror = _Mirror("a")
    heard: list[str] = []

    def broken(applied: Applied) -> None:
        raise RuntimeError("a bug in one listener")

    mirror.state.changes.listen(broken)
    mirror.state.changes.listen(lambda applied: heard.append(type(applied.message).__name__))
    mirror.status("a", "stopping")
    assert heard == ["StateChanged"]


async def test_until_is_woken_by_the_change_and_bounded() -> None:
    mirror = _Mirror("a", state="stopped")
    rt = mirror.state.runtimes["a"]
    changes = mirror.state.changes
    assert await changes.until(lambda: rt.state == "stopped", 0)  # true already: no wait
    asked = asyncio.Event()

    def ready() -> bool:
        asked.set()  # first asked before the waiter listens, then at each change
        return rt.state == "ready"

    waiting = asyncio.ensure_future(changes.until(ready, 30))
    await asked.wait()  # the waiter has run up to its wait
    assert len(changes) == 1
    mirror.status("a", "starting")
    assert not waiting.done()
    mirror.status("a", "ready")
    assert await asyncio.wait_for(waiting, 5)
    assert len(changes) == 0
    assert not await changes.until(lambda: rt.state == "failed", 0.01)
    assert len(changes) == 0


# --------------------------------------------------------------------------------------------------
# admission: drains and ignored websockets


async def test_admission_acks_a_drain_once_nothing_is_in_flight() -> None:
    mirror = _Mirror("a", "b")
    link = _Link()
    admission = Admission(mirror.state, link)  # type: ignore[arg-type]
    a, b = mirror.state.runtimes["a"], mirror.state.runtimes["b"]
    mirror.drain("a", 3)  # nothing in flight: acked at once
    assert link.drains == [("a", 3)]
    admission.begin(b)
    mirror.drain("b", 4)
    assert link.drains == [("a", 3)]  # b's request holds it back
    admission.end(b)
    assert link.drains == [("a", 3), ("b", 4)]
    assert a.drain_acked and b.drain_acked


async def test_ignored_websockets_are_closed_when_their_model_stops() -> None:
    mirror = _Mirror("a")
    Admission(mirror.state, _Link())  # type: ignore[arg-type]
    closed: list[str] = []

    class Relay:  # what `websocket.WebSocketRelay` offers its model's runtime
        def close_for_stop(self) -> None:
            closed.append("ws")

    mirror.state.runtimes["a"].ignored_ws.add(Relay())
    mirror.status("a", "ready", reason="a new reason: no stop")
    mirror.status("a", "draining")
    assert closed == []
    mirror.status("a", "stopping")
    assert closed == ["ws"]


# --------------------------------------------------------------------------------------------------
# a Ready that arrives before the events of the model's new run


async def test_a_ready_ahead_of_the_events_is_served_when_they_come_without_another_ensure() -> (
    None
):
    mirror = _Mirror("a")
    mirror.drain("a", 1)  # the old run drained: this process sees it so
    mirror.status("a", "stopping")
    link = _Link()
    ctx = _context(mirror, link)
    rt = mirror.state.runtimes["a"]
    admitting = asyncio.ensure_future(pipeline._admit(ctx, Account(), ctx.admission.slot(rt)))
    # The daemon's Ready came first (its reply and its events travel on different sockets); the
    # request has run up to its wait once the test runs again.
    await link.asked.wait()
    assert not admitting.done() and rt.in_flight == 0 and len(mirror.state.changes) == 2
    mirror.status("a", "stopped")
    assert not admitting.done()  # still the old run
    mirror.status("a", "starting")  # a new run, not listening yet (maybe not this Ready's)
    assert not admitting.done() and link.claims == []  # the daemon holds the model meanwhile
    mirror.status("a", "ready")  # the mirror has caught up
    address = await asyncio.wait_for(admitting, 5)
    assert address.url == _UPSTREAM
    assert link.ensures == ["a"]  # no second round trip
    assert rt.in_flight == 1
    assert link.claims == [("a", 1)]  # claimed, in flight in the same cast


async def test_a_drain_of_the_new_run_sends_the_request_to_the_daemon_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mirror is right and the Ready stale: the model was drained again after answering.
    The request asks again once the bound passes, and is served on the run that follows."""
    monkeypatch.setattr(pipeline, "_CATCH_UP_S", 0.01)
    mirror = _Mirror("a")

    def daemon(ensures: int) -> None:
        if ensures == 1:
            mirror.drain("a", 2)  # a swap took it away again
        else:
            mirror.status("a", "stopping")
            mirror.status("a", "stopped")
            mirror.status("a", "starting")  # the daemon started it again for this request

    link = _Link(daemon)
    rt = mirror.state.runtimes["a"]
    ctx = _context(mirror, link)
    await asyncio.wait_for(pipeline._admit(ctx, Account(), ctx.admission.slot(rt)), 5)
    assert link.ensures == ["a", "a"] and rt.in_flight == 1
    # The stale Ready was not taken, and said so (the daemon's drain waits for that word); the
    # second was admitted.
    assert link.claims == [("a", 0), ("a", 1)]


async def test_a_mirror_that_never_catches_up_is_a_clear_503(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pipeline, "_CATCH_UP_S", 0.01)
    mirror = _Mirror("a")
    mirror.drain("a", 1)
    link = _Link()
    rt = mirror.state.runtimes["a"]
    acc = Account()
    with pytest.raises(Unavailable) as error:
        ctx = _context(mirror, link)
        await asyncio.wait_for(pipeline._admit(ctx, acc, ctx.admission.slot(rt)), 5)
    assert error.value.status == 503 and error.value.code == "state_out_of_step"
    assert "retry shortly" in error.value.message
    assert link.ensures == ["a"] * pipeline._CATCH_UP_TRIES
    assert link.claims == [("a", 0)] * pipeline._CATCH_UP_TRIES  # none taken, each said so
    assert rt.in_flight == 0 and len(mirror.state.changes) == 1  # admission's own, nothing left
    assert acc.waited > 0
