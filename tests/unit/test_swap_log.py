"""The daemon's swap log (daemon/observe/swap_log.py), told a scheduler's state changes and phase
durations as the daemon's effects tell it: the records it keeps and publishes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from swapd.daemon.observe.swap_log import SwapLog
from swapd.ipc.causes import DeferCause, StartCause, StopCause
from swapd.ipc.messages import Document, Event, QuerySwaps, SwapRecorded


class FakeEndpoint:
    """Stands for the daemon's endpoint: keeps what would be published."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.seq = 0

    def publish_nowait(self, make: Callable[[int], Event]) -> None:
        self.seq += 1
        self.events.append(make(self.seq))

    def reply(self, identity: bytes, reply: Document) -> Any:
        return None


def make() -> tuple[SwapLog, FakeEndpoint, list[float]]:
    now = [1000.0]
    endpoint = FakeEndpoint()
    return SwapLog("inst", endpoint, size=5, clock=lambda: now[0]), endpoint, now


def test_a_start_then_a_swap_with_its_four_phases() -> None:
    log, endpoint, now = make()
    log.wanted("a", StartCause.REQUEST)
    log.changed("a", "starting", "")
    log.phase("a", "start", 0.1)
    log.changed("a", "starting", "waiting for the health check")  # same state: nothing
    log.phase("a", "health", 0.5)
    now[0] += 0.6
    log.changed("a", "ready", "")
    (start,) = log.records
    assert (start.kind, start.model, start.cause, start.result) == ("start", "a", "request", "ok")
    assert start.phases == {"start": 0.1, "health": 0.5}
    assert round(start.ended - start.began, 6) == 0.6

    log.wanted("b", StartCause.REQUEST)
    swapped = {"cause": StopCause.SWAP, "for_model": "b"}
    log.changed("a", "draining", "swapped out for b", **swapped)
    log.phase("a", "drain", 0.2)
    log.changed("a", "stopping", "swapped out for b", **swapped)
    log.phase("a", "stop", 0.3)
    now[0] += 0.5
    log.changed("a", "stopped", "swapped out for b", **swapped)
    log.changed("b", "starting", "")
    log.phase("b", "start", 0.05)
    log.phase("b", "health", 1.0)
    now[0] += 1.05
    log.changed("b", "ready", "")
    _, stop, swap = log.records
    assert (stop.kind, stop.cause, stop.for_model, stop.phases) == (
        "stop", "swap", "b", {"drain": 0.2, "stop": 0.3},
    )  # fmt: skip
    assert swap.kind == "swap" and swap.evicted == ("a",) and swap.cause == "request"
    assert swap.phases == {"drain": 0.2, "stop": 0.3, "start": 0.05, "health": 1.0}
    assert swap.began == stop.began and round(swap.ended - swap.began, 6) == 1.55
    published = [e.record for e in endpoint.events if isinstance(e, SwapRecorded)]
    assert published == list(log.records)
    assert [e.seq for e in endpoint.events] == [1, 2, 3]


def test_causes_of_stops_crash_failure_and_preload() -> None:
    log, _, _ = make()
    causes = (
        ("t", "ttl expired", StopCause.TTL),
        ("u", "unloaded", StopCause.UNLOAD),
        ("r", "config changed", StopCause.RELOAD),
    )
    for model, reason, cause in causes:
        log.changed(model, "ready", "")
        log.changed(model, "draining", reason, cause=cause)
        log.changed(model, "stopped", reason, cause=cause)
    assert [(r.model, r.kind, r.cause) for r in log.records] == [
        ("t", "stop", "ttl"), ("u", "stop", "unload"), ("r", "stop", "reload"),
    ]  # fmt: skip
    log.changed("c", "ready", "")
    crashed = "process 12 exited on its own (exit code 3)"
    log.changed("c", "stopped", crashed, cause=StopCause.CRASH)
    crash = log.records[-1]
    assert (crash.kind, crash.cause, crash.reason) == (
        "crash", "crash", "process 12 exited on its own (exit code 3)",
    )  # fmt: skip
    log.wanted("f", StartCause.PRELOAD)
    log.changed("f", "starting", "")
    log.changed("f", "failed", "exited during startup with exit code 1")
    failed = log.records[-1]
    assert (failed.kind, failed.cause, failed.result) == ("start", "preload", "failed")
    assert failed.reason == "exited during startup with exit code 1"
    # The ring is bounded (size 5 here): with a sixth record, the oldest went.
    assert len(log.records) == 5 and log.records[0].model == "t"
    log.changed("c", "ready", "")
    log.changed("c", "stopped", "process 13 exited on its own (exit code 3)", cause=StopCause.CRASH)
    assert len(log.records) == 5 and log.records[0].model == "u"


def test_an_aborted_start_and_the_query() -> None:
    log, _, _ = make()
    log.changed("a", "starting", "")
    log.changed("a", "stopped", "start aborted: unloaded", cause=StopCause.UNLOAD)
    (record,) = log.records
    assert record.result == "aborted" and record.reason == "start aborted: unloaded"
    document = log.document(QuerySwaps(id=7))
    assert document.id == 7 and b'"result":"aborted"' in document.body


def test_the_cause_comes_with_the_stop_and_the_words_are_not_read() -> None:
    """A stop's cause is the scheduler's `StopCause`, carried here as it is: rewording the
    reason a person reads changes no record's cause (the log once matched the words, and a
    reworded reason turned a swap into `other`)."""
    log, _, _ = make()
    log.changed("a", "ready", "")
    log.changed("a", "draining", "made room for b", cause=StopCause.SWAP, for_model="b")
    log.changed("a", "stopped", "made room for b", cause=StopCause.SWAP, for_model="b")
    log.changed("b", "starting", "")
    log.changed("b", "ready", "")
    log.changed("c", "ready", "")
    log.changed("c", "stopped", "gone", cause=StopCause.CRASH)
    stop, swap, crash = log.records
    assert (stop.cause, stop.for_model) == (StopCause.SWAP, "b")
    assert swap.kind == "swap" and swap.evicted == ("a",)
    assert (crash.kind, crash.cause) == ("crash", StopCause.CRASH)


def test_what_a_queued_swap_waits_for_and_the_wait_its_record_carries() -> None:
    log, _, now = make()
    log.wanted("b", StartCause.REQUEST)
    assert not log.waiting("b", "", 990.0)  # queued: nothing to show yet
    assert log.waiting_now("b") is None
    assert log.waiting("b", "busy: a", 990.0)
    assert not log.waiting("b", "busy: a", 990.0)  # the same wait again: no news
    assert log.waiting_now("b") == ("busy: a", 990.0)
    assert log.waiting("b", "behind the swap to c in the queue", 990.0)
    assert log.waiting("b", "", 990.0)  # it claimed its room
    assert log.waiting_now("b") is None
    log.changed("b", "starting", "")
    now[0] += 2.0
    log.changed("b", "ready", "")
    (record,) = log.records
    assert (record.queued, record.waited) == (990.0, 12.0)
    assert record.waited_for == ("busy: a", "behind the swap to c in the queue")
    assert not log.swap_ended("b")  # it waited for nothing at its end

    # A restart of the same swap (a reload changed the definition) does not carry it again,
    # and a swap answered otherwise while it waits ends its wait.
    log.waiting("c", "busy: a", 995.0)
    log.changed("c", "starting", "")
    log.changed("c", "stopped", "config changed")
    log.changed("c", "starting", "")
    log.changed("c", "ready", "")
    aborted, restarted = list(log.records)[1:]
    assert (aborted.result, aborted.waited_for, restarted.waited_for) == (
        "aborted",
        ("busy: a",),
        (),
    )
    assert restarted.queued == 0.0 and restarted.waited == 0.0
    assert log.swap_ended("c")  # told no claim here: it still waits for "busy: a" at its end
    log.waiting("d", "busy: a", 999.0)
    assert log.swap_ended("d") and log.waiting_now("d") is None


def test_a_sleep_a_wake_and_a_failed_wake_are_records_of_their_own() -> None:
    log, _, now = make()
    swapped = {"cause": StopCause.SWAP, "for_model": "b"}
    log.changed("a", "ready", "")
    log.changed("a", "draining", "swapped out for b (asleep)", **swapped)
    log.phase("a", "drain", 0.1)
    log.changed("a", "sleeping", "swapped out for b (asleep)", **swapped)
    log.phase("a", "sleep", 0.4)
    now[0] += 0.5
    log.changed("a", "asleep", "swapped out for b (asleep)", **swapped)
    log.changed("b", "starting", "")
    log.changed("b", "ready", "")
    sleep, swap = log.records
    assert (sleep.kind, sleep.cause, sleep.for_model) == ("sleep", "swap", "b")
    assert sleep.phases == {"drain": 0.1, "sleep": 0.4}
    # The sleep is folded into b's swap, as an evicted model's stop is.
    assert (swap.kind, swap.evicted, swap.phases) == ("swap", ("a",), {"drain": 0.1, "sleep": 0.4})

    log.wanted("a", StartCause.REQUEST)
    log.changed("a", "waking", "")
    log.phase("a", "wake", 0.2)
    log.changed("a", "ready", "woken")
    wake = log.records[-1]
    assert (wake.kind, wake.cause, wake.result, wake.phases) == (
        "wake",
        "request",
        "ok",
        {"wake": 0.2},
    )

    failed = {"cause": StopCause.WAKE_FAILED}
    log.changed("a", "asleep", "asked to sleep", cause=StopCause.SLEEP)
    log.changed("a", "waking", "")
    log.changed("a", "stopping", "its wake failed", **failed)
    log.changed("a", "stopped", "its wake failed", **failed)
    kinds = [(r.kind, r.result, r.cause) for r in list(log.records)[-2:]]
    assert kinds == [("wake", "failed", "request"), ("stop", "ok", "wake_failed")]


def test_a_swap_held_back_for_readys_out_says_so_in_its_record() -> None:
    log, _, now = make()
    log.wanted("a", StartCause.REQUEST)
    on = "requests made ready for b (1) to be admitted first"
    assert log.waiting("a", on, 990.0, DeferCause.UNCLAIMED_READY)
    assert log.waiting("a", "", 990.0)
    log.changed("a", "starting", "")
    now[0] += 1.0
    log.changed("a", "ready", "")
    (record,) = log.records
    assert record.deferred == (DeferCause.UNCLAIMED_READY,)
    assert record.waited_for == (on,)
