"""The activity log's pure parts: token counts from the shapes servers send
(daemon/observe/tokens.py), the stream tail the relay keeps (proxy/floor/account.py), what of it a
proxy sends to be parsed (proxy/observe/activity.py), and llama-swap's histogram
(activity_query.py)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from swapd.daemon.observe import tokens
from swapd.daemon.observe.activity_query import histogram
from swapd.daemon.observe.tokens import error_message, from_body, from_stream_tail
from swapd.ipc.activity import Tokens
from swapd.proxy.floor.account import TAIL_BYTES, Tail


def _json(doc: object) -> bytes:
    return json.dumps(doc).encode()


def test_openai_usage_with_cached_tokens() -> None:
    body = _json(
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 6},
            },
        }
    )
    assert from_body(body) == Tokens(input_tokens=10, output_tokens=4, cache_tokens=6)


def test_anthropic_and_responses_shapes() -> None:
    anthropic = _json(
        {"usage": {"input_tokens": 3, "output_tokens": 5, "cache_read_input_tokens": 2}}
    )
    assert from_body(anthropic) == Tokens(input_tokens=3, output_tokens=5, cache_tokens=2)
    responses = _json(
        {
            "response": {
                "usage": {"input_tokens": 8, "output_tokens": 1},
            }
        }
    )
    assert from_body(responses) == Tokens(input_tokens=8, output_tokens=1)
    started = _json({"type": "message_start", "message": {"usage": {"input_tokens": 9}}})
    assert from_body(started).input_tokens == 9


def test_llamacpp_timings_win_over_usage() -> None:
    body = _json(
        {
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
            "timings": {
                "prompt_n": 20,
                "predicted_n": 30,
                "cache_n": 7,
                "prompt_per_second": 512.5,
                "predicted_per_second": 42.0,
                "draft_n": 12,
                "draft_n_accepted": 9,
            },
        }
    )
    assert from_body(body) == Tokens(
        input_tokens=20,
        output_tokens=30,
        cache_tokens=7,
        prompt_per_second=512.5,
        tokens_per_second=42.0,
        draft_tokens=12,
        draft_acc_tokens=9,
    )


def test_infill_array_and_odd_shapes() -> None:
    infill = _json([{"content": "a"}, {"content": "b", "timings": {"predicted_n": 2}}])
    assert from_body(infill).output_tokens == 2
    assert from_body(_json({"usage": "n/a", "timings": None})) == Tokens()
    assert from_body(b'not json, but mentions "usage"') == Tokens()
    assert from_body(_json({"choices": []})) == Tokens()
    # Counts written as floats, speeds as integers: the general way reads them all the same.
    odd = from_body(_json({"usage": {"prompt_tokens": 12.0, "completion_tokens": True},
                           "timings": {"predicted_per_second": 61, "cache_n": 2.0}}))  # fmt: skip
    assert (odd.input_tokens, odd.output_tokens, odd.cache_tokens) == (12, -1, 2)
    assert odd.tokens_per_second == 61.0 and isinstance(odd.tokens_per_second, float)


_NUMBER = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(-5, 1e6), st.text(max_size=3)
)
_COUNTS = st.dictionaries(
    st.sampled_from(["prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
                     "cache_read_input_tokens"]),
    _NUMBER,
) | st.builds(
    lambda d, key: {key: {"cached_tokens": d}},
    _NUMBER,
    st.sampled_from(["input_tokens_details", "prompt_tokens_details"]),
)  # fmt: skip
_TIMINGS = st.dictionaries(
    st.sampled_from(["prompt_n", "predicted_n", "cache_n", "prompt_per_second",
                     "predicted_per_second", "draft_n", "draft_n_accepted"]),
    _NUMBER,
)  # fmt: skip
_DOC = st.fixed_dictionaries(
    {},
    optional={
        "usage": _COUNTS,
        "timings": _TIMINGS,
        "response": st.fixed_dictionaries({"usage": _COUNTS}),
        "message": st.fixed_dictionaries({"usage": _COUNTS}),
        "choices": st.just([{"index": 0}]),
    },
)


@settings(max_examples=400, deadline=None)
@given(_DOC)
def test_the_struct_path_reads_what_the_general_way_reads(doc: dict[str, object]) -> None:
    """`from_body` decodes into typed structs, and anything they refuse is read leniently into
    the same structs (`_lenient`): both must give the same counts for any document."""
    general = Tokens()
    tokens._from_object(json.loads(_json(doc)), general)
    assert from_body(_json(doc)) == general


def test_stream_tail_latest_usage_and_timings() -> None:
    events = [
        {"choices": [{"delta": {"content": "x"}}]},
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
        {"choices": [], "timings": {"predicted_n": 3, "predicted_per_second": 9.5}},
    ]
    stream = b"".join(b"data: " + _json(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    # The tail starts mid-event: that cut line is skipped.
    tail = b'tokens": 999}}\n\n' + stream
    assert from_stream_tail(tail) == Tokens(input_tokens=5, output_tokens=3, tokens_per_second=9.5)
    assert from_stream_tail(b"data: [DONE]\n\n") == Tokens()


def test_tail_keeps_only_the_last_bytes() -> None:
    tail = Tail()
    for _ in range(100):
        tail.feed(b"x" * 1000)
    tail.feed(b"end")
    assert tail.total == 100_003
    data = tail.data()
    assert len(data) == TAIL_BYTES and data.endswith(b"end")
    assert sum(len(c) for c in tail.chunks) < TAIL_BYTES + 1000


def test_error_messages() -> None:
    assert error_message(400, "Bad Request", _json({"error": {"message": "bad"}})) == "bad"
    assert error_message(500, "x", _json({"error": "boom"})) == "boom"
    assert error_message(422, "x", _json({"detail": "nope"})) == "nope"
    assert error_message(503, "Service Unavailable", b"<html>") == "503 Service Unavailable"
    long = error_message(500, "x", _json({"message": "m" * 600}))
    assert len(long) == 503 and long.endswith("...")


def test_histogram_as_llama_swap() -> None:
    assert histogram([]) is None
    assert histogram([5.0, 5.0]) == {
        "bins": [2],
        "binSize": 0.0,
        "min": 5.0,
        "max": 5.0,
        "p50": 5.0,
        "p95": 5.0,
        "p99": 5.0,
    }
    shaped = histogram([float(v) for v in range(1, 101)])
    assert shaped is not None
    assert len(shaped["bins"]) == 8 and sum(shaped["bins"]) == 100  # ceil(log2 100) + 1
    assert shaped["p50"] == 50.5 and shaped["min"] == 1.0 and shaped["max"] == 100.0
