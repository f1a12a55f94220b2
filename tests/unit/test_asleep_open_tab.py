"""`sleep.stopAfter` and open websockets (issue 37 item 5): an asleep model whose server still has
an ignored websocket open (an open ComfyUI tab) is not stopped; its `stopAfter` counts from when
the last one closed. The proxies report their open websockets per model in `Activity`."""

from __future__ import annotations

from swapd.daemon.policy import ttl
from swapd.daemon.policy.proxies import ProxyRegistry
from swapd.daemon.policy.records import ModelRecord
from swapd.ipc.routing_table import HttpCall, SleepSetting
from tests.support.models import Clock

SETTING = SleepSetting(sleep=(HttpCall("/free"),), stop_after=30.0, serves_asleep=True)


def _asleep(since: float) -> ModelRecord[object]:
    return ModelRecord("c", state="asleep", since=since, asleep_with=SETTING)


def test_an_open_websocket_keeps_an_asleep_model_from_its_stop_after() -> None:
    wall = Clock(1000.0)
    registry = ProxyRegistry(clock=Clock(), wall=wall)
    rec = _asleep(since=1000.0)
    assert ttl.stop_left(rec, SETTING, registry, now=1010.0) == 20.0
    wall.now = 1010.0
    registry.activity("p", "c", in_flight=0, at=990.0, websockets=1)  # a tab connected
    assert registry.websockets("c") == 1
    assert ttl.stop_left(rec, SETTING, registry, now=5000.0) is None
    assert ttl.asleep_due([rec], registry, now=5000.0) == []
    # Another proxy process's report of none does not close this one's.
    registry.activity("q", "c", in_flight=0, at=990.0, websockets=0)
    assert ttl.asleep_due([rec], registry, now=5000.0) == []
    # The tab closed at 5000: stopAfter counts from then, not from when it fell asleep.
    wall.now = 5000.0
    registry.activity("p", "c", in_flight=0, at=990.0, websockets=0)
    assert registry.websockets("c") == 0
    assert ttl.stop_left(rec, SETTING, registry, now=5010.0) == 20.0
    assert ttl.asleep_due([rec], registry, now=5029.0) == []
    assert ttl.asleep_due([rec], registry, now=5030.0) == ["c"]


def test_the_websockets_of_a_proxy_gone_silent_hold_nothing() -> None:
    clock = Clock(1000.0)
    wall = Clock(1000.0)
    registry = ProxyRegistry(clock=clock, wall=wall, silent_after=5.0)
    rec = _asleep(since=1000.0)
    registry.activity("p", "c", in_flight=0, at=1000.0, websockets=2)
    assert ttl.asleep_due([rec], registry, now=2000.0) == []
    clock.now += 6.0  # no heartbeat since: the proxy is gone, and its sockets with it
    assert registry.websockets("c") == 0
    assert ttl.asleep_due([rec], registry, now=2000.0) == ["c"]


def test_without_a_websocket_the_stop_after_is_as_before() -> None:
    wall = Clock(1000.0)
    registry = ProxyRegistry(clock=Clock(), wall=wall)
    rec = _asleep(since=1000.0)
    wall.now = 1005.0
    registry.activity("p", "c", in_flight=0, at=1005.0)  # a request's report
    assert ttl.stop_left(rec, SETTING, registry, now=1010.0) == 25.0
    assert ttl.asleep_due([rec], registry, now=1035.0) == ["c"]
