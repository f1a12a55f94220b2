"""Units of the observability code's fast paths, each checked against the plain way it
replaces: the event frames (escaping a payload's JSON, or filling a template with an activity
id, instead of encoding an envelope), the request figures' exposition (plain counts behind a
custom collector instead of prometheus-client's `Histogram`), the capture cache's bounds, and
the capture tee (`Tail`)."""

from __future__ import annotations

import base64
import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from swapd.daemon.observe import request_figures
from swapd.daemon.observe.captures import Capture, CaptureCache
from swapd.daemon.observe.request_figures import FOLD, SECONDS, SPEEDS, RequestFigures
from swapd.ipc.activity import ActivityRecord, Tokens
from swapd.ipc.event_frames import activity_frames, frame
from swapd.proxy.floor.account import TAIL_BYTES, Tail, TeeBudget


def _record(i: int, model: str = "m", **kw: object) -> ActivityRecord:
    return ActivityRecord(
        id=i,
        timestamp=1.5 + i,
        model=model,
        route="model",
        method="POST",
        req_path="/v1/chat/completions",
        resp_status_code=200,
        duration_ms=kw.pop("duration_ms", 3.25 * i),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text())
def test_a_frame_is_the_envelope_encoded(text: str, source: str) -> None:
    data = {"source": source, "data": text}  # a log line: any text, quotes and controls too
    slow = b"event:message\ndata:%s\n\n" % msgspec.json.encode(
        {"type": "logData", "data": msgspec.json.encode(data).decode()}
    )
    assert frame("logData", data) == slow
    envelope = json.loads(slow[len(b"event:message\ndata:") :])
    assert json.loads(envelope["data"])["data"] == text


@given(st.integers(1, 2**62), st.integers(0, 50))
def test_activity_frames_are_the_id_events_encoded(first: int, count: int) -> None:
    expected = b"".join(frame("activity", {"id": n}) for n in range(first, first + count))
    assert activity_frames(first, count) == expected
    for raw in expected.split(b"\n\n")[:-1]:
        envelope = json.loads(raw[len(b"event:message\ndata:") :])
        assert envelope["type"] == "activity" and set(json.loads(envelope["data"])) == {"id"}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.endswith("_created"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.mark.parametrize("fold", [FOLD, 7])
def test_request_figures_expose_what_prometheus_histograms_would(
    fold: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a small FOLD the histograms sort their values into buckets between scrapes as well
    # as at them; values on a bucket's bound (5 ms, 100 tokens/s) belong to it (`le`).
    monkeypatch.setattr(request_figures, "FOLD", fold)
    records = [
        _record(
            i,
            model=f"m{i % 3}",
            ttfb_ms=-1.0 if i % 5 == 0 else i * 0.7,
            wait_ms=i * 10.0 if i % 4 == 0 else 0.0,
            tokens=Tokens(input_tokens=i, output_tokens=2 * i, cache_tokens=i % 2,
                          prompt_per_second=float(i * 13), tokens_per_second=float(i)),
        )
        for i in range(1, 400)
    ] + [
        _record(400 + i, duration_ms=ms, ttfb_ms=ms, wait_ms=ms,
                tokens=Tokens(prompt_per_second=speed, tokens_per_second=speed))
        for i, (ms, speed) in enumerate([(5.0, 100.0), (10.0, 1.0), (300_000.0, 10000.0)] * 3)
    ]  # fmt: skip
    figures = RequestFigures({name: name for name in ("m", "m0", "m1", "m2")})
    ours = CollectorRegistry()
    ours.register(figures)

    theirs = CollectorRegistry()
    requests = Counter("swapd_requests", "", ["model", "route", "status"], registry=theirs)
    duration = Histogram("swapd_request_duration_seconds", "", ["model", "route"],
                         buckets=SECONDS, registry=theirs)  # fmt: skip
    ttfb = Histogram("swapd_request_ttfb_seconds", "", ["model", "route"], buckets=SECONDS,
                     registry=theirs)  # fmt: skip
    wait = Histogram("swapd_request_wait_seconds", "", ["model"], buckets=SECONDS, registry=theirs)
    tokens = Counter("swapd_tokens", "", ["model", "kind"], registry=theirs)
    prompt = Histogram("swapd_prompt_tokens_per_second", "", ["model"], buckets=SPEEDS,
                       registry=theirs)  # fmt: skip
    gen = Histogram("swapd_generation_tokens_per_second", "", ["model"], buckets=SPEEDS,
                    registry=theirs)  # fmt: skip

    def count(batch: list[ActivityRecord]) -> None:
        figures.add(batch)
        for r in batch:
            requests.labels(r.model, r.route, str(r.resp_status_code)).inc()
            duration.labels(r.model, r.route).observe(r.duration_ms / 1000)
            ttfb.labels(r.model, r.route)
            wait.labels(r.model)
            if r.ttfb_ms >= 0:
                ttfb.labels(r.model, r.route).observe(r.ttfb_ms / 1000)
            if r.wait_ms > 0:
                wait.labels(r.model).observe(r.wait_ms / 1000)
            t = r.tokens
            for kind, n in (("prompt", t.input_tokens), ("generated", t.output_tokens),
                            ("cached", t.cache_tokens)):  # fmt: skip
                if n > 0:
                    tokens.labels(r.model, kind).inc(n)
                else:
                    tokens.labels(r.model, kind)
            if r.tokens.prompt_per_second > 0:
                prompt.labels(r.model).observe(r.tokens.prompt_per_second)
            if r.tokens.tokens_per_second > 0:
                gen.labels(r.model).observe(r.tokens.tokens_per_second)

    def same() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        mine, want = (
            _samples(generate_latest(ours).decode()),
            _samples(generate_latest(theirs).decode()),
        )
        assert mine.keys() == want.keys()
        # Counts exactly; sums to the last bits (the values are added in another order).
        assert {k: v for k, v in mine.items() if not k[0].endswith("_sum")} == {
            k: v for k, v in want.items() if not k[0].endswith("_sum")
        }
        assert {k: v for k, v in mine.items() if k[0].endswith("_sum")} == pytest.approx(
            {k: v for k, v in want.items() if k[0].endswith("_sum")}, rel=1e-12
        )
        return mine

    for batch in (records[:100], records[100:250]):
        count(batch)
    same()  # a scrape between batches, then more records: the next scrape counts them all
    count(records[250:])
    mine = same()
    assert mine[("swapd_requests_total", (("model", "m1"), ("route", "model"), ("status", "200")))]
    on_bound = (("le", "0.005"), ("model", "m"), ("route", "model"))
    assert mine[("swapd_request_duration_seconds_bucket", on_bound)] == 3


def _capture(i: int, size: int) -> Capture:
    return Capture(id=i, req_path="/p", req_body=b"x" * size, size=size)


def test_capture_cache_bounds_and_eviction() -> None:
    cache = CaptureCache(1000)
    assert not cache.add(_capture(1, 1001))  # larger than the whole buffer: never kept
    for i in range(1, 5):
        assert cache.add(_capture(i, 300))
    assert list(cache.items) == [2, 3, 4] and cache.size == 900  # the oldest went first
    assert cache.add(_capture(5, 1000))
    assert list(cache.items) == [5] and cache.evicted == 4
    body = cache.document(5)
    assert body is not None and base64.b64decode(json.loads(body)["req_body"]) == b"x" * 1000
    assert cache.document(4) is None
    cache.resize(0)
    assert not cache.items and not cache.add(_capture(6, 1))


def test_tail_keeps_everything_within_the_capture_bound() -> None:
    tee = TeeBudget(150_000)
    tail = Tail(keep=100_000, budget=tee)
    chunks = [bytes([i % 256]) * 1000 for i in range(100)]
    for chunk in chunks:
        tail.feed(chunk)
    assert tail.whole() == b"".join(chunks) and tail.total == 100_000
    tail.feed(b"!")  # one byte past the bound: the capture is let go, the tail stays
    assert tail.whole() is None
    assert tail.size < TAIL_BYTES + 1000 and tail.data() == (b"".join(chunks) + b"!")[-TAIL_BYTES:]
    assert tee.held == 0


def test_tees_share_one_budget() -> None:
    tee = TeeBudget(150_000)
    first, second = Tail(keep=100_000, budget=tee), Tail(keep=100_000, budget=tee)
    first.feed(b"a" * 100_000)
    second.feed(b"b" * 40_000)
    assert tee.held == 140_000
    second.feed(b"b" * 20_000)  # 160 000 held: past the process's budget, this capture goes
    assert second.whole() is None and tee.held == 100_000
    assert first.whole() == b"a" * 100_000
    first.release()
    assert tee.held == 0
    third = Tail(keep=100_000, budget=tee)
    third.feed(b"c" * 10)
    # Its stream ended (the relay closes every tail, however it ends): the share goes back at
    # once, whether or not the response reaches the accounting stage; what it kept stays.
    third.close()
    assert tee.held == 0
    assert third.whole() == b"c" * 10
    with pytest.raises(ValueError):
        Tail(keep=1)  # a capture counts against a budget, always
