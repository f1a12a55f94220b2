"""The daemon announces new activity records (`ActivityAdded`) and renders in-flight frames for
`/api/events` only while some proxy has an events client: each proxy's events hub counts its
clients and says so in a Hello the moment that count goes from none to some or back (and in every
heartbeat). Here the daemon's observer and a proxy's hub in-process; tests/stack/test_events.py's
`test_activity_events_follow_the_clients` runs the same against the real stack."""

from __future__ import annotations

from collections.abc import Callable

from swapd.daemon.config import Config
from swapd.daemon.observe.service import Observer
from swapd.ipc import codec
from swapd.ipc.activity import Finished, InFlight
from swapd.ipc.event_frames import frame
from swapd.ipc.messages import ActivityAdded, ActivityReport, Event, InFlightChanged, Reply
from swapd.proxy.mirror.state import ProxyState
from swapd.proxy.observe.events import EventHub, Subscriber


class _Endpoint:
    """The daemon's endpoint as the observer uses it: events through the real codec."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def publish_nowait(self, make: Callable[[int], Event]) -> None:
        self.events.append(codec.decode_event(codec.encode(make(len(self.events) + 1))))

    async def reply(self, identity: bytes, reply: Reply) -> None:
        raise AssertionError("no request here")


def _report(n: int, started: tuple[InFlight, ...] = ()) -> ActivityReport:
    record = Finished(
        10.0, "m", "", "model", "POST", "/v1/chat/completions", "application/json", 200, 2,
        0.01, 0.0, 0.005, "", b"{}", None,
    )  # fmt: skip
    return ActivityReport(proxy_id="p-1", records=(record,) * n, started=started, clock=1e9)


def _flight(n: int) -> InFlight:
    return InFlight(id=f"p-1-{n}", timestamp=1e9, model="m", req_path="/v1/x", method="POST")


async def _no_gpus() -> tuple[()]:
    return ()


def test_activity_and_inflight_events_only_while_some_proxy_watches() -> None:
    endpoint = _Endpoint()
    observer = Observer(Config(), "i", endpoint, lambda: (), _no_gpus)

    observer.report(_report(3, started=(_flight(1),)))
    # Nobody watches: the records are kept (and counted) all the same, no activity event goes
    # out, and the in-flight change goes out bare (every proxy keeps the table).
    assert [r.id for r in observer.store.records] == [1, 2, 3]
    assert not any(isinstance(e, ActivityAdded) for e in endpoint.events)
    (flights,) = endpoint.events
    assert isinstance(flights, InFlightChanged)
    assert [f.id for f in flights.upserts] == ["p-1-1"] and (flights.frames, flights.count) == (
        b"",
        0,
    )

    endpoint.events.clear()
    observer.watching("p-2", 1)  # another proxy's client: the events are for every proxy
    observer.report(_report(2, started=(_flight(2),)))
    kinds = {type(e): e for e in endpoint.events}
    added = kinds[ActivityAdded]
    # The batch's ids: the first report's three records were 1 to 3.
    assert isinstance(added, ActivityAdded) and (added.first, added.count) == (4, 2)
    flight = kinds[InFlightChanged]
    assert isinstance(flight, InFlightChanged) and flight.count == 1
    assert b"upsert" in flight.frames

    for stop in (lambda: observer.watching("p-2", 0), lambda: observer.forget("p-2")):
        observer.watching("p-2", 3)
        stop()
        endpoint.events.clear()
        observer.report(_report(1))
        assert endpoint.events == []
    assert observer.watchers == {}


async def test_the_hub_tells_when_its_clients_go_from_none_to_some_and_back() -> None:
    hub = EventHub(ProxyState(1))
    told: list[int] = []
    hub.on_watchers = lambda: told.append(hub.watchers)
    with hub.watched():
        assert told == [1]
        with hub.watched():
            assert hub.watchers == 2
        assert told == [1]  # 2 -> 1: still watched, the heartbeat carries the count
    assert told == [1, 0] and hub.watchers == 0
    try:
        with hub.watched():
            raise ConnectionResetError  # a client gone mid-stream still counts out
    except ConnectionResetError:
        pass
    assert told == [1, 0, 1, 0]


async def test_the_hub_gives_each_subscriber_an_activity_event_per_announced_id() -> None:
    hub = EventHub(ProxyState(1))
    hub.event(ActivityAdded(instance="i", seq=1, first=7, count=3))  # nobody to give it to
    sub = Subscriber()
    hub.subscribers.add(sub)
    hub.event(ActivityAdded(instance="i", seq=2, first=40, count=3))
    assert sub.count == 3 and hub.offered == 3
    assert b"".join(sub.take()) == b"".join(frame("activity", {"id": n}) for n in (40, 41, 42))
