"""The daemon's swap log (daemon/observe/swap_log.py), told a model's swap story as the scheduler
tells it (policy/story.py: began, phase done, ended; the phases' durations as the machinery
measures them): the records it keeps and publishes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from swapd.daemon.observe.swap_log import SwapLog
from swapd.daemon.policy.story import Began, Deferred, Ended, PhaseDone
from swapd.ipc import codec
from swapd.ipc.causes import DeferCause, StartCause, StopCause
from swapd.ipc.messages import Document, Event, QuerySwaps, SwapRecorded
from swapd.ipc.swap_record import SwapKind, SwapOutcome, SwapPhase, SwapRecord


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
    log.told(Began("a", SwapKind.START))
    log.told(PhaseDone("a", SwapPhase.START, 0.1))
    log.told(PhaseDone("a", SwapPhase.HEALTH, 0.5))
    now[0] += 0.6
    log.told(Ended("a", SwapOutcome.OK))
    (start,) = log.records
    assert (start.kind, start.model, start.cause, start.result) == ("start", "a", "request", "ok")
    assert start.phases == {"start": 0.1, "health": 0.5}
    assert round(start.ended - start.began, 6) == 0.6

    log.wanted("b", StartCause.REQUEST)
    log.told(Began("a", SwapKind.STOP, StopCause.SWAP, for_model="b"))
    log.told(PhaseDone("a", SwapPhase.DRAIN, 0.2))
    log.told(PhaseDone("a", SwapPhase.STOP, 0.3))
    now[0] += 0.5
    log.told(Ended("a", SwapOutcome.OK, "swapped out for b", came_to=SwapKind.STOP))
    log.told(Began("b", SwapKind.START))
    log.told(PhaseDone("b", SwapPhase.START, 0.05))
    log.told(PhaseDone("b", SwapPhase.HEALTH, 1.0))
    now[0] += 1.05
    log.told(Ended("b", SwapOutcome.OK))
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

    def crash_of(model: str, words: str) -> None:
        log.told(Began(model, SwapKind.CRASH, StopCause.CRASH))
        log.told(Ended(model, SwapOutcome.OK, words))

    causes = (
        ("t", "ttl expired", StopCause.TTL),
        ("u", "unloaded", StopCause.UNLOAD),
        ("r", "config changed", StopCause.RELOAD),
    )
    for model, reason, cause in causes:
        log.told(Began(model, SwapKind.STOP, cause))
        log.told(Ended(model, SwapOutcome.OK, reason, came_to=SwapKind.STOP))
    assert [(r.model, r.kind, r.cause) for r in log.records] == [
        ("t", "stop", "ttl"), ("u", "stop", "unload"), ("r", "stop", "reload"),
    ]  # fmt: skip
    crashed = "process 12 exited on its own (exit code 3)"
    crash_of("c", crashed)
    crash = log.records[-1]
    assert (crash.kind, crash.cause, crash.reason) == (
        "crash", "crash", "process 12 exited on its own (exit code 3)",
    )  # fmt: skip
    log.wanted("f", StartCause.PRELOAD)
    log.told(Began("f", SwapKind.START))
    log.told(Ended("f", SwapOutcome.FAILED, "exited during startup with exit code 1"))
    failed = log.records[-1]
    assert (failed.kind, failed.cause, failed.result) == ("start", "preload", "failed")
    assert failed.reason == "exited during startup with exit code 1"
    # The ring is bounded (size 5 here): with a sixth record, the oldest went.
    assert len(log.records) == 5 and log.records[0].model == "t"
    crash_of("c", "process 13 exited on its own (exit code 3)")
    assert len(log.records) == 5 and log.records[0].model == "u"


def test_an_aborted_start_and_the_query() -> None:
    log, _, _ = make()
    log.told(Began("a", SwapKind.START))
    log.told(Ended("a", SwapOutcome.ABORTED, "start aborted: unloaded"))
    (record,) = log.records
    assert record.result == "aborted" and record.reason == "start aborted: unloaded"
    document = log.document(QuerySwaps(id=7))
    assert document.id == 7 and b'"result":"aborted"' in document.body


def test_the_cause_comes_with_the_stop_and_the_words_are_not_read() -> None:
    """A stop's cause is the scheduler's `StopCause`, carried here as it is: rewording the
    reason a person reads changes no record's cause (the log once matched the words, and a
    reworded reason turned a swap into `other`)."""
    log, _, _ = make()
    log.told(Began("a", SwapKind.STOP, StopCause.SWAP, for_model="b"))
    log.told(Ended("a", SwapOutcome.OK, "made room for b", came_to=SwapKind.STOP))
    log.told(Began("b", SwapKind.START))
    log.told(Ended("b", SwapOutcome.OK))
    log.told(Began("c", SwapKind.CRASH, StopCause.CRASH))
    log.told(Ended("c", SwapOutcome.OK, "gone"))
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
    assert log.waiting_now("b") == ("busy: a", 990.0, None)
    assert log.waiting("b", "behind the swap to c in the queue", 990.0)
    assert log.waiting("b", "", 990.0)  # it claimed its room
    assert log.waiting_now("b") is None
    log.told(Began("b", SwapKind.START))
    now[0] += 2.0
    log.told(Ended("b", SwapOutcome.OK))
    (record,) = log.records
    assert (record.queued, record.waited) == (990.0, 12.0)
    assert record.waited_for == ("busy: a", "behind the swap to c in the queue")
    assert not log.swap_ended("b")  # it waited for nothing at its end

    # A restart of the same swap (a reload changed the definition) does not carry it again,
    # and a swap answered otherwise while it waits ends its wait.
    log.waiting("c", "busy: a", 995.0)
    log.told(Began("c", SwapKind.START))
    log.told(Ended("c", SwapOutcome.ABORTED, "config changed"))
    log.told(Began("c", SwapKind.START))
    log.told(Ended("c", SwapOutcome.OK))
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
    log.told(Began("a", SwapKind.STOP, StopCause.SWAP, for_model="b"))
    log.told(PhaseDone("a", SwapPhase.DRAIN, 0.1))
    log.told(PhaseDone("a", SwapPhase.SLEEP, 0.4))
    now[0] += 0.5
    log.told(Ended("a", SwapOutcome.OK, "swapped out for b (asleep)", came_to=SwapKind.SLEEP))
    log.told(Began("b", SwapKind.START))
    log.told(Ended("b", SwapOutcome.OK))
    sleep, swap = log.records
    assert (sleep.kind, sleep.cause, sleep.for_model) == ("sleep", "swap", "b")
    assert sleep.phases == {"drain": 0.1, "sleep": 0.4}
    # The sleep is folded into b's swap, as an evicted model's stop is.
    assert (swap.kind, swap.evicted, swap.phases) == ("swap", ("a",), {"drain": 0.1, "sleep": 0.4})

    log.wanted("a", StartCause.REQUEST)
    log.told(Began("a", SwapKind.WAKE))
    log.told(PhaseDone("a", SwapPhase.WAKE, 0.2))
    log.told(Ended("a", SwapOutcome.OK))
    wake = log.records[-1]
    assert (wake.kind, wake.cause, wake.result, wake.phases) == (
        "wake",
        "request",
        "ok",
        {"wake": 0.2},
    )

    # A failed wake ends its record; the stop that follows is one of its own.
    log.told(Began("a", SwapKind.WAKE))
    log.told(Ended("a", SwapOutcome.FAILED, "its wake failed"))
    log.told(Began("a", SwapKind.STOP, StopCause.WAKE_FAILED))
    log.told(Ended("a", SwapOutcome.OK, "its wake failed", came_to=SwapKind.STOP))
    kinds = [(r.kind, r.result, r.cause) for r in list(log.records)[-2:]]
    assert kinds == [("wake", "failed", "request"), ("stop", "ok", "wake_failed")]


def test_a_record_reads_on_the_wire_as_it_always_did() -> None:
    """Kinds, outcomes and phases are enums (`ipc/swap_record.py`); `/api/swaps`, the `swap`
    events and the daemon's `SwapRecorded` carry their values, byte for byte what the plain
    strings they replaced gave (these bytes were taken from that tree; but for the msgpack map
    header, below), and decode to the enums."""
    record = SwapRecord(
        id=3,
        kind=SwapKind.SWAP,
        model="b",
        cause=StartCause.REQUEST,
        began=1000.5,
        ended=1002.0,
        result=SwapOutcome.OK,
        phases={
            SwapPhase.DRAIN: 0.2,
            SwapPhase.STOP: 0.3,
            SwapPhase.START: 0.05,
            SwapPhase.HEALTH: 1.0,
        },
        evicted=("a",),
        queued=999.0,
        waited=3.0,
        waited_for=("busy: a",),
        folded=(2,),
    )
    assert msgspec.json.encode(record) == (
        b'{"id":3,"kind":"swap","model":"b","cause":"request","began":1000.5,"ended":1002.0,'
        b'"result":"ok","reason":"","phases":{"drain":0.2,"stop":0.3,"start":0.05,"health":1.0},'
        b'"evicted":["a"],"for_model":"","queued":999.0,"waited":3.0,"waited_for":["busy: a"],'
        b'"folded":[2]}'
    )
    event = codec.encode(SwapRecorded(instance="i", seq=4, record=record))
    assert event.hex() == (
        "84a474797065ac537761705265636f72646564a8696e7374616e6365a169a373657104a67265636f7264"
        # The record's 15 entries under a map16 header (`de000f`), the plain strings' tree had a
        # fixmap (`8f`): msgspec sizes it so once a field may be absent (`deferred`, not here).
        "de000f"
        "a2696403a46b696e64a473776170a56d6f64656ca162a56361757365a772657175657374a562656761"
        "6ecb408f440000000000a5656e646564cb408f500000000000a6726573756c74a26f6ba6726561736f6e"
        "a0a670686173657384a5647261696ecb3fc999999999999aa473746f70cb3fd3333333333333a5737461"
        "7274cb3fa999999999999aa66865616c7468cb3ff0000000000000a76576696374656491a161a9666f72"
        "5f6d6f64656ca0a6717565756564cb408f380000000000a6776169746564cb4008000000000000aa7761"
        "697465645f666f7291a7627573793a2061a6666f6c6465649102"
    )
    decoded = codec.decode_event(event)
    assert isinstance(decoded, SwapRecorded) and decoded.record == record
    assert decoded.record.kind is SwapKind.SWAP and SwapPhase.HEALTH in decoded.record.phases


def test_a_swap_held_back_for_readys_out_says_so_in_its_record() -> None:
    log, _, now = make()
    log.wanted("a", StartCause.REQUEST)
    on = "requests made ready for b (1) to be admitted first"
    assert log.waiting("a", on, 990.0)
    log.told(Deferred("a", DeferCause.UNCLAIMED_READY))
    assert log.waiting("a", "", 990.0)
    log.told(Began("a", SwapKind.START))
    now[0] += 1.0
    log.told(Ended("a", SwapOutcome.OK))
    (record,) = log.records
    assert record.deferred == (DeferCause.UNCLAIMED_READY,)
    assert record.waited_for == (on,)
    # On the wire only where it was held back (records that were not read as they always did).
    assert b'"deferred":["unclaimed_ready"]' in msgspec.json.encode(record)
