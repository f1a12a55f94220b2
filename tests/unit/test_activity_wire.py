"""What a proxy sends the daemon for each finished request, and what the daemon makes of it: the
array-like `Finished` with its `RawCapture` through the real codec (a record of another shape is
refused, never misread), the stream tail cut to the lines that carry counts (the daemon parses
the same counts from it as from the whole tail), the path cut from the request target, the
daemon's redaction of a capture's headers, an events subscriber's backlog bounded in bytes
(counting a batch of activity frames as the events it holds, resynced after a loss), log text
in events of bounded size, and the in-flight frames the daemon renders."""

from __future__ import annotations

import json

import msgspec
import pytest
from aiohttp.test_utils import make_mocked_request
from multidict import istr

from swapd.daemon.config import Config
from swapd.daemon.observe.captures import REDACTED, capture_of
from swapd.daemon.observe.intake import record_of
from swapd.daemon.observe.service import Observer
from swapd.daemon.observe.tokens import from_stream_tail
from swapd.ipc import codec
from swapd.ipc.activity import Finished, InFlight, RawCapture, Tokens, flight_json
from swapd.ipc.event_frames import frame
from swapd.ipc.messages import ActivityReport
from swapd.proxy.floor.account import Tail
from swapd.proxy.mirror.state import ProxyState
from swapd.proxy.observe import events
from swapd.proxy.observe.activity import counted_part, path_of
from swapd.proxy.observe.backlog import PIECE_BYTES, Budget, Gap


def _finished(**kw: object) -> Finished:
    fields: dict[str, object] = {
        "started": 10.0,
        "model": "m",
        "model_asked": "",
        "route": "model",
        "method": "POST",
        "req_path": "/v1/chat/completions",
        "resp_content_type": "application/json",
        "resp_status_code": 200,
        "size": 42,
        "duration": 0.25,
        "waited": 0.125,
        "ttfb": -1.0,
        "reason": "",
        "body": b'{"usage":{"prompt_tokens":3,"completion_tokens":2}}',
        "tail": None,
    }
    fields.update(kw)
    return Finished(**fields)  # type: ignore[arg-type]


def test_a_report_crosses_the_codec_and_becomes_the_record() -> None:
    capture = RawCapture(
        ((b"Authorization", b"Bearer sk-secret"), (b"X-Tag", b"a"), (b"x-tag", b"b")),
        b"{}",
        ((istr("Content-Type"), "application/json"), ("Set-Cookie", "s=1")),
        b"ok",
    )
    sent = ActivityReport(
        proxy_id="p-1", records=(_finished(capture=capture),), clock=1_700_000_000.0
    )
    wire = codec.encode(sent)
    got = codec.decode_inbound(wire)
    assert isinstance(got, ActivityReport) and got.records[0].capture is not None
    record = record_of(got.records[0], got.clock, got.proxy_id)
    assert record.timestamp == 1_700_000_010.0 and record.model_asked == "m"
    assert (record.duration_ms, record.wait_ms, record.ttfb_ms) == (250.0, 125.0, -1.0)
    assert record.bytes == 42 and record.proxy_id == "p-1"
    assert record.tokens == Tokens(input_tokens=3, output_tokens=2)
    kept = capture_of(got.records[0].capture, 7, record.req_path)
    assert kept.req_headers == {"Authorization": REDACTED, "X-Tag": "a", "x-tag": "b"}
    assert kept.resp_headers == {"Content-Type": "application/json", "Set-Cookie": REDACTED}
    assert b"sk-secret" not in msgspec.json.encode(kept)
    heads = sum(
        len(k) + len(v) for h in (kept.req_headers, kept.resp_headers) for k, v in h.items()
    )
    assert kept.size == heads + len(b"{}") + len(b"ok")


def test_a_record_of_another_shape_is_refused() -> None:
    # A report whose records are maps (an older proxy's) must fail as a whole, not be misread.
    old = {"type": "ActivityReport", "proxy_id": "p", "records": [{"timestamp": 1.0}]}
    with pytest.raises(codec.DecodeError):
        codec.decode_inbound(msgspec.msgpack.encode(old))


def test_errors_are_worded_by_the_daemon() -> None:
    item = _finished(resp_status_code=503, reason="Service Unavailable", body=b"<html>")
    record = record_of(item, 0.0, "p")
    assert record.error_msg == "503 Service Unavailable" and record.tokens == Tokens()
    item = _finished(resp_status_code=400, reason="Bad Request", body=b'{"error":"no"}')
    assert record_of(item, 0.0, "p").error_msg == "no"


def _sse(doc: object) -> bytes:
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


def test_a_stream_tail_is_cut_to_the_lines_with_counts() -> None:
    tail = Tail()
    for i in range(200):
        tail.feed(_sse({"choices": [{"delta": {"content": f"token {i}"}}]}))
    tail.feed(_sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 200}}))
    tail.feed(_sse({"choices": [], "timings": {"predicted_n": 201, "predicted_per_second": 9.5}}))
    tail.feed(b"data: [DONE]\n\n")
    whole = tail.data()
    cut = counted_part(tail, "text/event-stream")
    assert cut is not None and cut.startswith(b"data: ") and len(cut) < 200
    assert (
        from_stream_tail(cut)
        == from_stream_tail(whole)
        == Tokens(input_tokens=5, output_tokens=201, tokens_per_second=9.5)
    )
    # Nothing to count: nothing travels.
    plain = Tail()
    plain.feed(_sse({"choices": []}))
    assert counted_part(plain, "text/event-stream") is None
    # A JSON body streamed without a length (newlines and all) goes whole.
    pretty = json.dumps({"usage": {"prompt_tokens": 1}}, indent=2).encode()
    body = Tail()
    body.feed(pretty)
    assert counted_part(body, "application/json") == pretty


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("/v1/models?x=1&y=2", "/v1/models"),
        ("/a/../b?x#f", "/a/../b"),
        ("/p#frag?not-a-query", "/p"),
        ("/upstream/m/%7e/x", "/upstream/m/%7e/x"),
        ("http://127.0.0.1:1/v1/c?q", "/v1/c"),
    ],
)
def test_the_path_is_the_target_without_its_query(target: str, path: str) -> None:
    request = make_mocked_request("GET", target)
    assert path_of(request) == path


async def test_a_subscriber_is_bounded_in_bytes_and_resynced_after_a_loss() -> None:
    """A batch of activity frames counts as its events; what does not fit the subscriber's bytes
    is lost and counted; after what it had queued it is told (count and bytes) and sent the
    models' states and the in-flight snapshot afresh."""
    hub = events.EventHub(ProxyState())
    sub = events.Subscriber(limit=10)
    hub.subscribers.add(sub)
    hub.broadcast(b"a" * 6, 6)
    hub.broadcast(b"b" * 3, 3)
    hub.broadcast(b"c" * 2, 2)  # 11 bytes > 10: lost, as two events
    assert sub.count == 9 and sub.size == 9
    assert hub.counters()["lost"] == 2 and hub.counters()["lost_bytes"] == 2
    out = await sub.next_frames(hub)
    assert out[:2] == [b"a" * 6, b"b" * 3]
    kinds = [json.loads(f.split(b"data:", 1)[1])["type"] for f in out[2:]]
    assert kinds == ["eventsDropped", "modelStatus", "inflight"]
    assert b'\\"count\\":2' in out[2] and b'\\"bytes\\":2' in out[2]
    assert sub.size == 0 and not sub.items
    hub.broadcast(b"d" * 25, 25)  # larger than the whole bound: an empty backlog still takes it
    assert sub.count == 25 and list(sub.items) == [b"d" * 25]


async def test_log_text_becomes_events_of_bounded_size() -> None:
    """One 5 MiB line of model output is many `logData` events of at most 64 KiB of text each,
    cut between characters, encoded once for every subscriber (the same bytes object)."""
    hub = events.EventHub(ProxyState())
    hub.fanout = Budget(1 << 30)
    subs = [events.Subscriber(limit=1 << 30) for _ in range(3)]
    hub.subscribers.update(subs)
    line = ("é" * (5 << 19)).encode() + b"\n"  # 5 MiB of two-byte characters
    hub.upstream_log.put_nowait(line)
    frames = subs[0].take()
    assert len(frames) >= len(line) // PIECE_BYTES
    text = ""
    for raw in frames:
        data = json.loads(json.loads(raw.split(b"data:", 1)[1])["data"])
        assert data["source"] == "upstream" and len(data["data"].encode()) <= PIECE_BYTES
        text += data["data"]
    assert text.encode() == line  # nothing lost or mangled at the cuts
    assert all(a is b for a, b in zip(frames, subs[1].take(), strict=True))


def test_header_bytes_that_are_not_utf8_read_as_replacement() -> None:
    raw = RawCapture(((b"X-Odd", b"caf\xe9"), (b"Cookie", b"\xff")), None, (), None)
    kept = capture_of(raw, 1, "/v1/models")
    assert kept.req_headers == {"X-Odd": "caf\ufffd", "Cookie": REDACTED}
    assert json.loads(msgspec.json.encode(kept))["req_headers"]["X-Odd"] == "caf\ufffd"


def test_event_frames_are_the_envelope_encoded() -> None:
    """The daemon's in-flight frames and a proxy's own (one `frame` for both) are what encoding
    llama-swap's whole envelope gives."""
    flight = InFlight(id="p-3", timestamp=1.5, model="m\u00e9", req_path='/a"b', method="POST")
    for kind, data in (
        ("inflight", {"operation": "upsert", "request": flight_json(flight)}),
        ("inflight", {"operation": "remove", "id": "p-3"}),
        ("logData", {"source": "proxy", "data": 'line "one"\n\tline two \u2028'}),
    ):
        envelope = msgspec.json.encode({"type": kind, "data": msgspec.json.encode(data).decode()})
        assert frame(kind, data) == b"event:message\ndata:%s\n\n" % envelope


def test_a_tail_of_another_kind_is_not_sent() -> None:
    tail = Tail()
    tail.feed(b'RIFF..."usage"...')
    assert counted_part(tail, "audio/wav") is None


async def test_what_all_subscribers_cost_together_is_bounded() -> None:
    """Past the hub's fan-out budget (bytes a second, counted once per subscriber) an event is
    lost for every subscriber, and each is told; a lost state event makes each resync, a lost
    log chunk does not. One subscriber's ordinary traffic is far below it."""
    clock = [0.0]
    hub = events.EventHub(ProxyState())
    hub.fanout = Budget(150_000, clock=lambda: clock[0])
    subs = [events.Subscriber() for _ in range(1000)]
    hub.subscribers.update(subs)
    hub.broadcast(b"x" * 100, 1)  # 100 KB in all: within the budget
    hub.broadcast(b"y" * 100, 1)  # another 100 KB: past it, lost for all
    hub.upstream_log.put_nowait(b"z" * 100)
    assert all(s.items[0] == b"x" * 100 and isinstance(s.items[1], Gap) for s in subs)
    assert all(s.items[1].items == 2 and len(s.items) == 2 for s in subs)
    assert hub.counters()["lost"] == 2000
    out = await subs[0].next_frames(hub)
    kinds = [json.loads(f.split(b"data:", 1)[1])["type"] for f in out[1:]]
    assert kinds == ["eventsDropped", "modelStatus", "inflight"]  # the state event: a resync
    clock[0] += 1.0  # a second later the budget is whole again
    hub.upstream_log.put_nowait(b"w" * 10)  # 10 KB of log text in all
    out = await subs[1].next_frames(hub)
    kinds = [json.loads(f.split(b"data:", 1)[1])["type"] for f in out[1:]]
    assert kinds == ["eventsDropped", "modelStatus", "inflight", "logData"]  # where it was lost
    hub.upstream_log.put_nowait(b"v" * 145)  # 145 KB: past it again, a log chunk, no resync
    out = await subs[1].next_frames(hub)
    assert [json.loads(f.split(b"data:", 1)[1])["type"] for f in out] == ["eventsDropped"]


# --------------------------------------------------------------------------------------------------
# one bad record costs no other (issue 40, item 4)


def test_a_header_byte_that_is_not_utf8_costs_no_record_of_the_batch() -> None:
    """aiohttp reads a header's bytes that are not UTF-8 as surrogate escapes, which msgpack
    refuses: the proxy's whole report (every client's records of its last 100 ms) was lost. The
    codec sends the text with U+FFFD in their place, and the rest as it is."""
    flight = InFlight(
        id="p-1-1",
        timestamp=1e9,
        model="m",
        req_path="/v1/chat/\udcff",
        method="POST",
        req_headers={"User-Agent": "caf\udce9", "X-Ok": "fine"},  # as aiohttp reads b"caf\xe9"
    )
    records = (_finished(), _finished(req_path="/v1/\udcff\ud800"), _finished(model="n"))
    sent = ActivityReport(proxy_id="p-1", records=records, started=(flight,), clock=1e9)
    got = codec.decode_inbound(codec.encode(sent))
    assert isinstance(got, ActivityReport)
    assert [r.model for r in got.records] == ["m", "m", "n"]
    assert got.records[1].req_path.startswith("/v1/\ufffd") and got.records[0] == records[0]
    [entry] = got.started
    assert entry.req_headers["User-Agent"] == "caf\ufffd" and entry.req_headers["X-Ok"] == "fine"
    assert entry.req_path == "/v1/chat/\ufffd"


class _Quiet:
    """The daemon's endpoint as the observer uses it, for a test that reads only its store."""

    def publish_nowait(self, make: object) -> None:
        pass

    async def reply(self, identity: bytes, reply: object) -> None:
        raise AssertionError("no request here")


async def _no_gpus() -> tuple[()]:
    return ()


def test_an_answer_nested_too_deeply_costs_no_record_of_the_batch() -> None:
    """A model's (or a peer's) answer with `usage` nested 1,500 deep made the daemon drop every
    record of its batch (27 -> 0), and counts of `1e300` became 301-digit integers."""
    deep = b'{"usage":' + b'{"a":' * 1500 + b"1" + b"}" * 1500 + b"}"
    huge = b'{"usage":{"prompt_tokens":1e300,"completion_tokens":18446744073709551615}}'
    bodies = [deep, huge, deep.replace(b'"usage"', b'"error"')] + [None] * 24
    records = tuple(
        _finished(body=body, resp_status_code=500 if i == 2 else 200)
        for i, body in enumerate(bodies)
    )
    observer = Observer(Config(), "i", _Quiet(), lambda: (), _no_gpus)  # type: ignore[arg-type]
    observer.report(ActivityReport(proxy_id="p-1", records=records, clock=1e9))
    kept = observer.store.records
    assert len(kept) == 27
    assert kept[0].tokens == Tokens() and kept[1].tokens == Tokens()
    assert kept[2].error_msg == "500"


@pytest.mark.parametrize(
    ("count", "kept"),
    [(0, 0), (7, 7), (7.0, 7), (2**53, 2**53), (2**53 + 1, -1), (1e300, -1), (-3, -1), ("9", -1)],
)
def test_a_count_is_bounded(count: object, kept: int) -> None:
    body = json.dumps({"usage": {"prompt_tokens": count}}).encode()
    assert record_of(_finished(body=body), 0.0, "p").tokens.input_tokens == kept
