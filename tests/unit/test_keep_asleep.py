"""Keep an asleep model asleep or stop it, by what was learned of its returns (issue 37 item 6,
daemon/policy/keep_asleep.py through `ttl.stop_left`): with nothing learned `stopAfter` is the
bound, as before; a model that is asked back soon is kept asleep longer (up to 4 x stopAfter,
while the host has memory to spare); one that never comes back after so long is stopped from
stopAfter/2; an open websocket still holds it whatever was learned."""

from __future__ import annotations

from swapd.daemon.observe.traffic import Traffic
from swapd.daemon.policy import keep_asleep, ttl
from swapd.daemon.policy.proxies import ProxyRegistry
from swapd.daemon.policy.records import ModelRecord
from swapd.ipc.routing_table import HttpCall, SleepSetting
from tests.support.models import Clock

SETTING = SleepSetting(sleep=(HttpCall("/free"),), stop_after=100.0)


class Learned:
    """The learning as the rule reads it, over a real `Traffic`."""

    def __init__(self, traffic: Traffic, roomy: bool = True) -> None:
        self.traffic = traffic
        self.room = roomy

    def back_chance(self, model: str, idle: float, within: float, now: float) -> float | None:
        return self.traffic.back_chance(model, idle, within, now)

    def roomy(self) -> bool:
        return self.room


def _returns(gaps: list[float]) -> Traffic:
    learner = Traffic()
    at = 0.0
    learner.seen("c", at)
    for gap in gaps:
        at += gap
        learner.seen("c", at)
    return learner


def _asleep(since: float) -> ModelRecord[object]:
    return ModelRecord("c", state="asleep", since=since, asleep_with=SETTING)


def _setup() -> tuple[ModelRecord[object], ProxyRegistry]:
    wall = Clock(10_000.0)
    return _asleep(since=10_000.0), ProxyRegistry(clock=Clock(), wall=wall)


def test_nothing_learned_keeps_stop_after_as_the_bound() -> None:
    rec, registry = _setup()
    few = Learned(_returns([300.0, 300.0]))  # two returns: too few to say anything
    for learned in (None, few):
        assert ttl.stop_left(rec, SETTING, registry, now=10_040.0, learned=learned) == 60.0
        assert ttl.asleep_due([rec], registry, now=10_099.0, learned=learned) == []
        assert ttl.asleep_due([rec], registry, now=10_100.0, learned=learned) == ["c"]


def test_a_model_asked_back_after_a_longer_pause_is_kept_asleep() -> None:
    rec, registry = _setup()
    learned = Learned(_returns([150.0, 160.0, 170.0, 180.0]))
    # Past stopAfter (100 s), its returns still ahead: kept, at most until 4 x stopAfter.
    assert ttl.stop_left(rec, SETTING, registry, now=10_120.0, learned=learned) == 280.0
    assert ttl.asleep_due([rec], registry, now=10_120.0, learned=learned) == []
    # Past all of them: stopped.
    assert ttl.asleep_due([rec], registry, now=10_200.0, learned=learned) == ["c"]
    # Not while the host's memory is short.
    short = Learned(learned.traffic, roomy=False)
    assert ttl.asleep_due([rec], registry, now=10_120.0, learned=short) == ["c"]


def test_kept_no_longer_than_four_times_stop_after() -> None:
    learned = Learned(_returns([390.0, 395.0, 399.0, 1000.0]))
    assert keep_asleep.stop_left(399.0, 100.0, lambda i: 0.9, True) == 1.0
    assert keep_asleep.stop_left(400.0, 100.0, lambda i: 0.9, True) == 0.0
    rec, registry = _setup()
    assert ttl.asleep_due([rec], registry, now=10_400.0, learned=learned) == ["c"]


def test_a_model_never_asked_back_after_so_long_is_stopped_sooner() -> None:
    rec, registry = _setup()
    learned = Learned(_returns([12.0, 15.0, 20.0, 30.0]))  # back within 30 s, or never
    assert ttl.asleep_due([rec], registry, now=10_049.0, learned=learned) == []  # before S/2
    assert ttl.asleep_due([rec], registry, now=10_050.0, learned=learned) == ["c"]
    # One that comes back at 70-90 s is not stopped before its stopAfter.
    later = Learned(_returns([70.0, 80.0, 90.0]))
    assert ttl.stop_left(rec, SETTING, registry, now=10_050.0, learned=later) == 50.0


def test_an_open_websocket_holds_it_whatever_was_learned() -> None:
    rec, registry = _setup()
    learned = Learned(_returns([12.0, 15.0, 20.0, 30.0]))
    registry.activity("p", "c", in_flight=0, at=9_990.0, websockets=1)
    assert ttl.stop_left(rec, SETTING, registry, now=20_000.0, learned=learned) is None
    assert ttl.asleep_due([rec], registry, now=20_000.0, learned=learned) == []
