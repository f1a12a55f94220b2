"""The pure parts of swapd's Ollama dialect (`proxy/dialects/ollama/`): names and durations, the
request rewrite, the stream rewrite (server-sent events to NDJSON lines, fed in arbitrary
pieces), and the counts and durations every answer ends with."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swapd.ipc import codec
from swapd.ipc.messages import KeepAlive
from swapd.ipc.model_status import ModelStatus
from swapd.ipc.routing_table import RouteModel, RoutingTable
from swapd.ipc.states import ModelState
from swapd.proxy.dialects.ollama import listing, replies, requests, values
from swapd.proxy.dialects.ollama.relaying import Streamed
from swapd.proxy.dialects.ollama.streams import StreamTranslator
from swapd.proxy.floor.account import Account
from swapd.proxy.floor.errors import ProxyError, UpstreamBroken
from swapd.proxy.mirror.state import ModelRuntime, Routes
from tests.support import route_bodies


def _routes(*ids: str, aliases: tuple[str, ...] = ()) -> Routes:
    models = tuple(
        RouteModel(id=i, concurrency_limit=1, ttl=0, upstream="http://127.0.0.1:1", aliases=aliases)
        for i in ids
    )
    return Routes(RoutingTable(generation=1, models=models))


# --------------------------------------------------------------------------------------------------
# values


def test_names_take_latest_off_only_where_the_config_lacks_it() -> None:
    routes = _routes("qwen", "llama:latest", "org/m:7b", aliases=())
    assert values.resolve(routes, "qwen:latest") == "qwen"
    assert values.resolve(routes, "llama:latest") == "llama:latest"  # an id with the tag
    assert values.resolve(routes, "nope:latest") == "nope:latest"  # unknown: left for the 404
    assert values.listed_name("qwen") == "qwen:latest"
    assert values.listed_name("org/m:7b") == "org/m:7b"
    assert values.listed_name("host:1/m") == "host:1/m:latest"  # a `:` before the last `/`


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        (0, 0.0),
        ("0", 0.0),
        (300, 300.0),
        (2.5, 2.5),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("300ms", 0.3),
        ("45", 45.0),
        (-1, -1.0),
        ("-1m", -1.0),
        ("-1", -1.0),
        # Go's longest duration (int64 nanoseconds), Ollama's bound.
        (9_223_372_036, 9_223_372_036.0),
        ("2562047h", 2_562_047 * 3600.0),
    ],
)
def test_keep_alive_as_ollama_reads_it(given: object, seconds: float) -> None:
    assert values.keep_alive(given) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "given",
    [
        *("soon", "5 m", "m", "", "1h-3m", True, None, [1], "nan"),
        # Past Go's longest duration: Ollama cannot hold it, and no date can say when it ends.
        *(1e12, 9_223_372_037, float("inf"), "inf", "1e12", "2562048h", "1" * 5000 + "h"),
    ],
)
def test_bad_keep_alive_is_a_400(given: object) -> None:
    with pytest.raises(ProxyError) as bad:
        values.keep_alive(given)
    assert bad.value.status == 400 and "invalid keep_alive" in bad.value.message
    assert len(bad.value.message) < 400  # a huge value is not echoed whole


@pytest.mark.parametrize("kept", [values.MAX_KEEP_ALIVE_S, float("inf"), 1e300])
def test_ps_answers_for_any_keep_alive_the_daemon_holds(kept: float) -> None:
    """`/api/ps` answered 500 for every client after one `keep_alive: 1e12` (issue 40, item 3):
    the longest keep_alive is a date, and one beyond it (a proxy before the bound) is Ollama's
    far future."""
    routes = _routes("m")
    route = routes.table.models[0]
    status = ModelStatus(model="m", state=ModelState.READY, keep_alive=kept)
    rt = ModelRuntime("m", route, 1, status, state=ModelState.READY)
    for left in (None, kept):
        shown = msgspec.structs.replace(status, ttl_left=left)
        [entry] = listing.ps({"m": rt}, {"m": shown})["models"]
        at = entry["expires_at"]
        assert at == values.FOREVER if kept > values.MAX_KEEP_ALIVE_S else at[:2] == "23", at


def test_a_keep_alive_past_the_bound_does_not_travel_to_the_daemon() -> None:
    """The IPC contract bounds it too: a cast from anything that skipped the proxy's check is
    refused where the daemon decodes it, never kept as a TTL `swapd status` cannot print."""
    for seconds in (values.MAX_KEEP_ALIVE_S, -1.0):
        message = KeepAlive(proxy_id="p", model="m", seconds=seconds)
        assert codec.decode_inbound(codec.encode(message)) == message
    for seconds in (1e12, float("inf"), float("nan")):
        with pytest.raises(codec.DecodeError):
            codec.decode_inbound(codec.encode(KeepAlive(proxy_id="p", model="m", seconds=seconds)))


def test_timestamps_are_rfc3339_utc() -> None:
    assert values.timestamp(0) == "1970-01-01T00:00:00.000000Z"
    assert values.nanoseconds(1.5) == 1_500_000_000 and values.nanoseconds(-1) == 0


# --------------------------------------------------------------------------------------------------
# requests


def test_chat_request_rewrite() -> None:
    doc = {
        "model": "qwen:latest",
        "messages": [{"role": "user", "content": "hi"}],
        "options": {"temperature": 0.1, "num_predict": 20, "num_ctx": 8192, "stop": "\n",
                    "num_keep": 4, "top_k": 5, "min_p": 0.05},
        "format": {"type": "object"},
        "think": False,
        "keep_alive": "2m",
    }  # fmt: skip
    out = requests.translate("chat", doc, "qwen")
    assert (out.path, out.asked, out.name, out.stream) == (
        "/v1/chat/completions",
        "qwen:latest",
        "qwen",
        True,
    )
    assert out.keep_alive == 120.0 and out.keep_alive_given and not out.empty
    assert out.body == {
        "model": "qwen",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.1,
        "max_tokens": 20,
        "stop": ["\n"],
        "n_keep": 4,
        "top_k": 5,
        "min_p": 0.05,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": {"type": "object"}, "strict": True},
        },
        "chat_template_kwargs": {"enable_thinking": False},
    }


def test_unlimited_num_predict_is_left_out_and_stream_false_is_kept() -> None:
    out = requests.translate(
        "chat",
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": False,
         "options": {"num_predict": -1}, "format": "json"},
        "m",
    )  # fmt: skip
    assert "max_tokens" not in out.body and out.body["stream"] is False
    assert "stream_options" not in out.body
    assert out.body["response_format"] == {"type": "json_object"}
    assert out.keep_alive is None and not out.keep_alive_given


def test_generate_goes_to_chat_unless_raw_or_suffix() -> None:
    chat = requests.translate("generate", {"model": "m", "prompt": "p", "system": "s"}, "m")
    assert chat.path == "/v1/chat/completions" and not chat.completion
    assert chat.body["messages"] == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "p"},
    ]
    raw = requests.translate("generate", {"model": "m", "prompt": "p", "raw": True}, "m")
    assert raw.path == "/v1/completions" and raw.completion and raw.body["prompt"] == "p"
    fim = requests.translate("generate", {"model": "m", "prompt": "a", "suffix": "z"}, "m")
    assert fim.path == "/v1/completions" and fim.body["suffix"] == "z"
    assert requests.translate("generate", {"model": "m"}, "m").empty
    assert requests.translate("chat", {"model": "m", "messages": []}, "m").empty


def test_tool_calls_get_ids_and_tool_answers_find_their_call() -> None:
    given = [
        {"role": "user", "content": "weather in two cities"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "weather", "arguments": {"city": "Oslo"}}},
                {"function": {"name": "time", "arguments": {}}},
            ],
        },
        {"role": "tool", "content": "noon", "tool_name": "time"},
        {"role": "tool", "content": "rain", "tool_name": "weather"},
    ]
    out = requests.messages(given)
    assert out[1]["tool_calls"] == [
        {"id": "call_0", "type": "function",
         "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}},
        {"id": "call_1", "type": "function", "function": {"name": "time", "arguments": "{}"}},
    ]  # fmt: skip
    assert out[2]["tool_call_id"] == "call_1" and out[3]["tool_call_id"] == "call_0"


def test_images_become_data_urls_with_their_type() -> None:
    png = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJ"
        "RU5ErkJggg=="
    )
    jpeg = "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHRofHh0aHBwgJC4n"
    (message,) = requests.messages([{"role": "user", "content": "see", "images": [png, jpeg]}])
    assert message["content"][0] == {"type": "text", "text": "see"}
    urls = [part["image_url"]["url"] for part in message["content"][1:]]
    assert urls[0].startswith("data:image/png;base64,") and urls[1].startswith("data:image/jpeg;")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "model is required"),
        ({"model": "m", "messages": "hi"}, "messages must be a list"),
        ({"model": "m", "stream": "yes"}, "stream must be true or false"),
        ({"model": "m", "format": "xml"}, "format must be"),
        ({"model": "m", "options": [1]}, "options must be a JSON object"),
    ],
)
def test_bad_requests_are_400s(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ProxyError) as bad:
        requests.translate("chat", doc, "m")
    assert bad.value.status == 400 and message in bad.value.message


# --------------------------------------------------------------------------------------------------
# streams


def _sse(*events: dict[str, Any] | str) -> bytes:
    return b"".join(
        b"data: " + (e.encode() if isinstance(e, str) else json.dumps(e).encode()) + b"\n\n"
        for e in events
    )


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip


STREAM = _sse(
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"reasoning_content": "hmm"}),
    _chunk({"content": "Hel"}),
    _chunk({"content": "lo"}),
    _chunk({"tool_calls": [{"index": 0, "id": "c1",
                            "function": {"name": "f", "arguments": '{"a'}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '": 1}'}}]}),
    {**_chunk({}, "tool_calls"), "timings": {"prompt_n": 3, "cache_n": 1, "prompt_ms": 12.5,
                                              "predicted_n": 2, "predicted_ms": 40.0}},
    {"object": "chat.completion.chunk", "choices": [],
     "usage": {"prompt_tokens": 4, "completion_tokens": 2}},
    "[DONE]",
)  # fmt: skip


def _lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines()]


def _translate(pieces: list[bytes]) -> tuple[list[dict[str, Any]], StreamTranslator]:
    ticks = iter(float(i) for i in range(100))
    clock = replies.Clock(started=0.0, waited=0.25)
    translate = StreamTranslator("chat", False, "qwen:latest", clock, lambda: next(ticks))
    out = b"".join(translate.feed(p) for p in pieces) + translate.end()
    return _lines(out), translate


def test_a_stream_becomes_ollamas_lines() -> None:
    lines, translate = _translate([STREAM])
    assert [line.get("message", {}).get("thinking") for line in lines[:1]] == ["hmm"]
    assert [line["message"]["content"] for line in lines[:3]] == ["", "Hel", "lo"]
    assert all(line["done"] is False and line["model"] == "qwen:latest" for line in lines[:4])
    assert lines[3]["message"]["tool_calls"] == [
        {"id": "c1", "function": {"name": "f", "arguments": {"a": 1}, "index": 0}}
    ]
    last = lines[4]
    assert last["done"] is True and last["done_reason"] == "stop"
    assert last["message"] == {"role": "assistant", "content": ""}
    assert (last["prompt_eval_count"], last["eval_count"]) == (4, 2)  # usage wins
    assert last["prompt_eval_duration"] == 12_500_000 and last["eval_duration"] == 40_000_000
    assert last["load_duration"] == 250_000_000
    assert all(type(last[k]) is int for k in ("total_duration", "load_duration"))
    assert len(lines) == 5
    assert json.loads(translate.counts() or b"{}") == {
        "usage": {"prompt_tokens": 4, "completion_tokens": 2},
        "timings": {"prompt_n": 3, "cache_n": 1, "prompt_ms": 12.5, "predicted_n": 2,
                    "predicted_ms": 40.0},
    }  # fmt: skip


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_the_stream_cut_anywhere_gives_the_same_lines(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    pieces = [STREAM[a:b] for a, b in itertools.pairwise(bounds)]
    whole, _ = _translate([STREAM])
    cut, _ = _translate(pieces)
    strip = [{k: v for k, v in line.items() if k not in ("created_at",) and "duration" not in k}
             for line in cut]  # fmt: skip
    assert strip == [
        {k: v for k, v in line.items() if k not in ("created_at",) and "duration" not in k}
        for line in whole
    ]


def test_a_stream_without_done_ends_and_one_with_an_error_says_it() -> None:
    lines, _ = _translate([_sse(_chunk({"content": "a"}, "length"))])
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "length"
    assert "eval_duration" in lines[-1]  # measured: no timings came
    error = _sse({"error": {"code": 500, "message": "out of memory", "type": "server_error"}})
    lines, _ = _translate([_sse(_chunk({"content": "a"})), error])
    assert lines == [lines[0], {"error": "out of memory"}]


def test_a_text_completions_stream_for_generate() -> None:
    clock = replies.Clock(0.0, 0.0)
    translate = StreamTranslator("generate", True, "m", clock, lambda: 1.0)
    events = _sse({"choices": [{"index": 0, "text": "Once", "finish_reason": None}]},
                  {"choices": [{"index": 0, "text": " upon", "finish_reason": "length"}]},
                  "[DONE]")  # fmt: skip
    lines = _lines(translate.feed(events) + translate.end())
    assert [line["response"] for line in lines] == ["Once", " upon", ""]
    assert lines[-1]["done_reason"] == "length" and "message" not in lines[-1]


# --------------------------------------------------------------------------------------------------
# whole answers


def test_a_whole_chat_answer() -> None:
    doc = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hi", "reasoning_content": "r"},
            }
        ],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1},
    }
    out = replies.whole("chat", False, "m", doc, replies.Clock(0.0, 0.0, ended=0.5))
    assert out["message"] == {"role": "assistant", "content": "hi", "thinking": "r"}
    assert (out["done"], out["done_reason"], out["prompt_eval_count"], out["eval_count"]) == (
        True,
        "stop",
        2,
        1,
    )
    assert out["total_duration"] == 500_000_000 and out["eval_duration"] == 500_000_000
    assert "prompt_eval_duration" not in out  # nobody knows it


def test_embeddings_in_their_order_and_the_older_shape() -> None:
    doc = {
        "data": [{"index": 1, "embedding": [2.0]}, {"index": 0, "embedding": [1.0]}],
        "usage": {"prompt_tokens": 3},
    }
    out = replies.whole("embed", False, "e", doc, replies.Clock(0.0, 0.0, ended=0.0))
    assert out["embeddings"] == [[1.0], [2.0]] and out["prompt_eval_count"] == 3
    single = replies.whole("embeddings", False, "e", doc, replies.Clock(0.0, 0.0), single=True)
    assert single == {"embedding": [1.0]}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": {"message": "too long", "type": "x"}}', "too long"),
        (b'{"error": "plain"}', "plain"),
        (b'{"detail": "Not Found"}', "Not Found"),
        (b"upstream text", "upstream text"),
        (b"", "502 Bad Gateway"),
    ],
)
def test_upstream_errors_in_ollamas_words(body: bytes, message: str) -> None:
    assert replies.error_message(body, 502, "Bad Gateway") == message


# --------------------------------------------------------------------------------------------------
# hostile bodies


@pytest.mark.parametrize("calls", [True, -1, 1.5, "x", {"function": {}}])
def test_tool_calls_of_the_wrong_type_are_a_400(calls: object) -> None:
    """`messages[0].tool_calls` of `true`, `-1` or `1.5` answered 500 (issue 40, item 2)."""
    with pytest.raises(ProxyError) as bad:
        requests.messages([{"role": "assistant", "tool_calls": calls}])
    assert bad.value.status == 400 and "tool_calls must be a list" in bad.value.message


@pytest.mark.parametrize("function", ["get_weather", 3, ["a"]])
def test_a_tool_calls_function_of_the_wrong_type_is_a_400(function: object) -> None:
    with pytest.raises(ProxyError) as bad:
        requests.messages([{"role": "assistant", "tool_calls": [{"function": function}]}])
    assert bad.value.status == 400 and "function must be a JSON object" in bad.value.message


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["chat", "generate", "embed", "embeddings"]), route_bodies.ollama(("m",)))
def test_any_body_is_translated_or_refused_with_a_400(kind: requests.Kind, doc: Any) -> None:
    """Every field Ollama's routes read, with any JSON value in it: the body is translated into
    one that encodes, or refused with a 400; never another error (a 500)."""
    try:
        out = requests.translate(kind, doc, "m")
    except ProxyError as exc:
        assert exc.status == 400, exc
        return
    requests.encode(out.body)


class _Broken:
    """A model's streamed answer that breaks off after `pieces` (the model died)."""

    def __init__(self, *pieces: bytes) -> None:
        self.pieces = pieces

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        raise UpstreamBroken("connection closed before the end of the body")

    def close(self) -> None:
        pass


@pytest.mark.parametrize("pieces", [(), (_sse(_chunk({"content": "Hel"})),)], ids=["none", "one"])
async def test_a_stream_broken_off_ends_with_ollamas_error_line(pieces: tuple[bytes, ...]) -> None:
    """A model that died mid-stream under `/api/chat` gave a 200 with an empty body (issue 40,
    item 10): as Ollama, the stream ends with an `{"error": ...}` line, and no `done` line."""
    clock = replies.Clock(started=0.0, waited=0.0)
    translate = StreamTranslator("chat", False, "qwen:latest", clock, lambda: 1.0)
    acc = Account(model="qwen")
    streamed = Streamed(_Broken(*pieces), translate, acc, [])  # type: ignore[arg-type]
    lines = _lines(await streamed.read())
    assert [line["message"]["content"] for line in lines[:-1]] == ["Hel"] * len(pieces)
    assert lines[-1] == {
        "error": "upstream qwen broke off the response: "
        "connection closed before the end of the body"
    }


DEEP = b'{"usage":' + b'{"a":' * 1500 + b"1" + b"}" * 1500 + b"}"


def test_a_model_answer_nested_too_deeply_or_with_huge_figures_is_read() -> None:
    """The model's (or a peer's) answer is hostile input too: nested 1,500 deep, it read as no
    JSON (an error's text, a stream's skipped event, a tool call's arguments kept as text), and
    counts and durations out of any range read as not reported or as Go's longest duration."""
    assert replies.error_message(DEEP, 500, "x").startswith('{"usage":{"a":')
    clock = replies.Clock(started=0.0, waited=0.0)
    translate = StreamTranslator("chat", False, "m", clock, lambda: 1.0)
    assert translate.feed(b"data: " + DEEP + b"\n\n") == b""
    [call] = replies.tool_calls([{"function": {"name": "f", "arguments": "[" * 1500}}])
    assert call["function"]["arguments"] == {"arguments": "[" * 1500}
    usage = {"prompt_tokens": 1e300, "completion_tokens": 2**70}
    out = replies.stats(usage, {"prompt_ms": 1e308, "predicted_ms": -5.0}, clock)
    assert "prompt_eval_count" not in out and "eval_count" not in out
    assert (out["prompt_eval_duration"], out["eval_duration"]) == (2**63 - 1, 0)
    json.loads(replies.encode(out))
