"""Ollama's API against the real stack, driven by Ollama's own Python client (`ollama` from PyPI,
its sync and async clients), with plain HTTP where the client hides what is checked (content
types, `HEAD /`, the request the model got).

The models are tests/support/upstreams/fake_model.py (it stands for llama-server: OpenAI routes,
llama.cpp's `timings`, tool calls and image answers as llama-server gives them), each logging the
requests that reach it, so a test reads the OpenAI request swapd made of an Ollama one.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import ollama
import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, free_port, http_get, wait_for

pytestmark = pytest.mark.processes

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 16
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


VISION = {"in": ["text", "image"], "out": ["text"], "tools": True, "context": 8192}


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    stack = Stack("")
    alpha, vision = model_ports(2)
    stack.write_config(
        {
            "healthCheckTimeout": 15,
            "models": {
                "alpha": local_model(
                    "alpha",
                    alpha,
                    "--request-log",
                    str(stack.base / "alpha.requests"),
                    ttl=300,
                    aliases=["al"],
                ),
                "vision": local_model("vision", vision, capabilities=VISION),
                "hidden": local_model("hidden", free_port(), unlisted=True),
            },
        }
    )
    with stack:
        yield stack


@pytest.fixture(scope="module")
def client(stack: Stack) -> ollama.Client:
    return ollama.Client(host=stack.url, timeout=60)


def sent(stack: Stack) -> list[dict[str, Any]]:
    """The requests alpha received, oldest first: method, path and JSON body."""
    path = Path(stack.base / "alpha.requests")
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        entry = json.loads(line)
        body = base64.b64decode(entry["body_b64"])
        out.append(
            {
                "method": entry["method"],
                "path": entry["raw_path"],
                "body": json.loads(body) if body else None,
            }
        )
    return out


def last_sent(stack: Stack, path: str) -> dict[str, Any]:
    return [r for r in sent(stack) if r["path"] == path][-1]["body"]


def post(stack: Stack, path: str, body: object, headers: dict[str, str] | None = None):
    """(status, headers, body bytes) of a POST, error statuses included."""
    request = urllib.request.Request(
        stack.url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def durations(part: Any) -> dict[str, Any]:
    return {
        k: getattr(part, k)
        for k in (
            "total_duration",
            "load_duration",
            "prompt_eval_duration",
            "eval_duration",
            "prompt_eval_count",
            "eval_count",
        )
    }


# --------------------------------------------------------------------------------------------------
# what is configured, what runs


def test_list_names_the_configured_models_in_ollamas_shape(client: ollama.Client) -> None:
    listed = {m.model: m for m in client.list().models}
    assert set(listed) == {"alpha:latest", "vision:latest"}  # `hidden` is unlisted
    for model in listed.values():
        assert isinstance(model.modified_at, datetime)
        assert isinstance(model.size, int)
        assert isinstance(model.digest, str) and len(model.digest) == 64
        assert model.details is not None and isinstance(model.details.family, str)


def test_tags_raw_fields_have_ollamas_types(stack: Stack) -> None:
    status, body = http_get(stack.url + "/api/tags")
    assert status == 200
    (alpha,) = [m for m in json.loads(body)["models"] if m["model"] == "alpha:latest"]
    assert alpha["name"] == "alpha:latest"
    assert type(alpha["size"]) is int
    assert datetime.fromisoformat(alpha["modified_at"]).tzinfo is not None


def test_show_says_what_the_config_says(client: ollama.Client) -> None:
    shown = client.show("vision")
    assert shown.capabilities == ["completion", "vision", "tools"]
    assert shown.modelinfo == {"general.architecture": "swapd", "swapd.context_length": 8192}
    assert isinstance(shown.modified_at, datetime)
    assert client.show("alpha:latest").capabilities == ["completion"]
    assert client.show("al").capabilities == ["completion"]  # an alias
    with pytest.raises(ollama.ResponseError) as refused:
        client.show("nope")
    assert refused.value.status_code == 404
    assert refused.value.error == "model 'nope' not found"


def test_ps_lists_the_loaded_model_with_its_expiry(client: ollama.Client, stack: Stack) -> None:
    client.chat(model="alpha", messages=[{"role": "user", "content": "hi"}], keep_alive="10m")
    ps = client.ps()
    (alpha,) = [m for m in ps.models if m.model == "alpha:latest"]
    assert alpha.name == "alpha:latest"
    assert isinstance(alpha.size_vram, int) and isinstance(alpha.size, int)
    assert alpha.expires_at is not None
    left = alpha.expires_at - datetime.now(UTC)
    assert timedelta(minutes=5) < left <= timedelta(minutes=10)  # keep_alive, not ttl's 5 min
    assert stack.model("alpha")["keep_alive"] == 600

    client.chat(model="alpha", messages=[{"role": "user", "content": "hi"}], keep_alive=-1)
    (alpha,) = [m for m in client.ps().models if m.model == "alpha:latest"]
    assert alpha.expires_at is not None and alpha.expires_at.year == 2318  # never
    assert stack.model("alpha")["ttl_left"] is None

    # A request without keep_alive returns the model to its ttl (300 s), as in Ollama.
    client.chat(model="alpha", messages=[{"role": "user", "content": "hi"}])
    wait_for(lambda: stack.model("alpha")["keep_alive"] is None, what="keep_alive cleared")
    (alpha,) = [m for m in client.ps().models if m.model == "alpha:latest"]
    assert alpha.expires_at is not None
    assert alpha.expires_at - datetime.now(UTC) <= timedelta(seconds=300)


def test_version_and_root_answer_as_ollama_does(stack: Stack) -> None:
    status, body = http_get(stack.url + "/api/version")
    version = json.loads(body)
    assert status == 200
    assert tuple(int(n) for n in version["version"].split(".")) >= (0, 6, 4)
    assert version["swapd_version"] and version["commit"] and version["build_date"]

    status, body = http_get(stack.url + "/")
    assert (status, body) == (200, b"Ollama is running")
    head = urllib.request.Request(stack.url + "/", method="HEAD")
    with urllib.request.urlopen(head, timeout=5) as response:
        assert response.status == 200
    # A browser is sent to the web UI, as before.
    page = urllib.request.Request(stack.url + "/", headers={"Accept": "text/html,*/*"})
    with urllib.request.urlopen(page, timeout=5) as response:
        assert response.url == stack.url + "/ui/"


# --------------------------------------------------------------------------------------------------
# answers


def test_chat_not_streamed(client: ollama.Client, stack: Stack) -> None:
    reply = client.chat(
        model="alpha",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        options={"temperature": 0.2, "num_predict": 9, "stop": ["\n"], "seed": 7, "num_ctx": 99,
                 "top_k": 3},
        format="json",
    )  # fmt: skip
    assert reply.model == "alpha"
    assert reply.message.role == "assistant"
    assert reply.message.content == "hello from alpha"
    assert reply.done is True and reply.done_reason == "stop"
    figures = durations(reply)
    assert all(type(v) is int for v in figures.values()), figures
    # The model's own usage and llama.cpp timings: 1 prompt token in 10 ms, 3 tokens in 60 ms.
    assert figures["prompt_eval_count"] == 1 and figures["eval_count"] == 3
    assert figures["prompt_eval_duration"] == 10_000_000
    assert figures["eval_duration"] == 60_000_000
    body = last_sent(stack, "/v1/chat/completions")
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert body["stream"] is False
    assert {k: body[k] for k in ("temperature", "max_tokens", "stop", "seed", "top_k")} == {
        "temperature": 0.2,
        "max_tokens": 9,
        "stop": ["\n"],
        "seed": 7,
        "top_k": 3,
    }
    assert body["response_format"] == {"type": "json_object"}
    assert "num_ctx" not in body and "options" not in body and "keep_alive" not in body


def test_chat_streamed_line_by_line(client: ollama.Client, stack: Stack) -> None:
    parts = list(
        client.chat(
            model="alpha:latest",
            messages=[{"role": "user", "content": "count"}],
            stream=True,
            options={"x_chunks": 4},  # passed on: the fake model streams that many pieces
        )
    )
    assert [p.message.content for p in parts[:-1]] == ["tok0 ", "tok1 ", "tok2 ", "tok3 "]
    assert all(p.done is False and p.model == "alpha:latest" for p in parts[:-1])
    last = parts[-1]
    assert last.done is True and last.done_reason == "stop" and last.message.content == ""
    figures = durations(last)
    assert all(type(v) is int for v in figures.values()), figures
    assert figures["prompt_eval_count"] == 7 and figures["eval_count"] == 4
    assert figures["eval_duration"] == 80_000_000  # llama.cpp's predicted_ms, in ns
    body = last_sent(stack, "/v1/chat/completions")
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_a_stream_reaches_the_client_while_the_model_still_writes(stack: Stack) -> None:
    """Each line is sent as its piece arrives: the first is read while the model's request is
    still in flight (never a whole answer held back)."""
    request = urllib.request.Request(
        stack.url + "/api/chat",
        data=json.dumps(
            {
                "model": "alpha",
                "messages": [{"role": "user", "content": "slowly"}],
                "options": {"x_chunks": 30, "x_delay": 0.1},
            }
        ).encode(),
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Type"] == "application/x-ndjson"
        first = json.loads(response.readline())
        assert first["message"]["content"] == "tok0 " and first["done"] is False
        # The model is still answering: the proxy counts its request in flight.
        running = {m["model"]: m for m in stack.get_json("/running")[1]["running"]}
        assert running["alpha"]["in_flight"] == 1
        lines = [json.loads(line) for line in response.read().splitlines()]
    assert lines[-1]["done"] is True and len(lines) == 30


def test_generate_streamed_and_not(client: ollama.Client, stack: Stack) -> None:
    reply = client.generate(model="alpha", prompt="why?", system="short answers")
    assert reply.response == "hello from alpha" and reply.done is True
    assert last_sent(stack, "/v1/chat/completions")["messages"] == [
        {"role": "system", "content": "short answers"},
        {"role": "user", "content": "why?"},
    ]
    parts = list(client.generate(model="alpha", prompt="why?", stream=True))
    assert "".join(p.response or "" for p in parts) == "tok0 tok1 tok2 tok3 tok4 "
    assert parts[-1].done is True and parts[-1].eval_count == 5
    # raw: the prompt as it is, to the model's text completion route.
    raw = list(client.generate(model="alpha", prompt="Once", raw=True, stream=True))
    assert "".join(p.response or "" for p in raw) == "completion of Once"
    assert raw[-1].prompt_eval_count == 4 and raw[-1].eval_count == 2
    assert last_sent(stack, "/v1/completions")["prompt"] == "Once"


def test_embed_and_the_older_embeddings(client: ollama.Client, stack: Stack) -> None:
    reply = client.embed(model="alpha", input=["a", "bbb"])
    assert reply.embeddings == [[0.1, 0.2, 1.0], [0.1, 0.2, 3.0]]
    assert reply.model == "alpha"
    assert type(reply.prompt_eval_count) is int and type(reply.total_duration) is int
    assert last_sent(stack, "/v1/embeddings") == {"model": "alpha", "input": ["a", "bbb"]}
    single = client.embeddings(model="alpha", prompt="hello")
    assert list(single.embedding) == [0.1, 0.2, 5.0]


def test_tools_both_ways(client: ollama.Client, stack: Stack) -> None:
    reply = client.chat(
        model="alpha", messages=[{"role": "user", "content": "weather?"}], tools=[WEATHER]
    )
    (call,) = reply.message.tool_calls or []
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "x"}
    # Streamed: llama-server sends the arguments in fragments; Ollama sends the call whole.
    parts = list(
        client.chat(
            model="alpha",
            messages=[{"role": "user", "content": "weather?"}],
            tools=[WEATHER],
            stream=True,
        )
    )
    calls = [c for p in parts for c in p.message.tool_calls or []]
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("get_weather", {"city": "x"})
    ]
    # The history goes back with ids tying the tool's answer to its call.
    client.chat(
        model="alpha",
        messages=[
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
        ],
    )
    history = last_sent(stack, "/v1/chat/completions")["messages"]
    assert history[1]["tool_calls"] == [
        {"id": "call_0", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"x"}'}}
    ]  # fmt: skip
    assert history[2] == {
        "role": "tool",
        "content": "sunny",
        "tool_call_id": "call_0",
        "name": "get_weather",
    }


def test_images_go_as_image_parts(client: ollama.Client, stack: Stack) -> None:
    reply = client.chat(
        model="alpha",
        messages=[{"role": "user", "content": "what is this?", "images": [PNG, JPEG]}],
    )
    assert reply.message.content == "2 images: image/png, image/jpeg"
    (message,) = last_sent(stack, "/v1/chat/completions")["messages"]
    assert message["content"][0] == {"type": "text", "text": "what is this?"}
    assert message["content"][1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
    generated = client.generate(model="alpha", prompt="describe", images=[PNG])
    assert generated.response == "1 images: image/png"


async def test_the_async_client(stack: Stack) -> None:
    client = ollama.AsyncClient(host=stack.url, timeout=60)
    assert "alpha:latest" in {m.model for m in (await client.list()).models}
    pieces = [
        p.message.content
        async for p in await client.chat(
            model="alpha", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    ]
    assert "".join(p or "" for p in pieces) == "tok0 tok1 tok2 tok3 tok4 "
    reply = await client.generate(model="alpha", prompt="hi")
    assert reply.response == "hello from alpha"
    assert (await client.embed(model="alpha", input="x")).embeddings == [[0.1, 0.2, 1.0]]
    assert any(m.model == "alpha:latest" for m in (await client.ps()).models)


# --------------------------------------------------------------------------------------------------
# loading and unloading


def test_keep_alive_zero_unloads_the_model_after_its_answer(
    client: ollama.Client, stack: Stack
) -> None:
    reply = client.chat(model="al", messages=[{"role": "user", "content": "hi"}], keep_alive=0)
    assert reply.message.content == "hello from alpha"
    wait_for(lambda: stack.model("alpha")["state"] == "stopped", 15, what="alpha to unload")
    assert all(m.model != "alpha:latest" for m in client.ps().models)


def test_keep_alive_0_right_after_ones_own_chat_unloads_once_the_model_is_idle(
    client: ollama.Client, stack: Stack
) -> None:
    """One user alone: an empty generate with `keep_alive: 0` just after its own chat (so the
    model was in use in the last 3 s) is answered at once, and the model unloads once it is no
    longer in use (docs/swapping.md, "No one client thrashes the GPU")."""
    client.chat(model="al", messages=[{"role": "user", "content": "hi"}])
    unloaded = client.generate(model="al", keep_alive=0)
    assert (unloaded.done_reason, unloaded.response) == ("unload", "")
    wait_for(lambda: stack.model("alpha")["state"] == "stopped", 15, what="alpha to unload")
    assert all(m.model != "alpha:latest" for m in client.ps().models)


def test_an_empty_generate_loads_and_with_keep_alive_0_unloads(
    client: ollama.Client, stack: Stack
) -> None:
    stack.swapd("unload")
    loaded = client.generate(model="vision")
    assert (loaded.done, loaded.done_reason, loaded.response) == (True, "load", "")
    assert stack.model("vision")["state"] == "ready"
    unloaded = client.chat(model="vision", messages=[], keep_alive=0)
    assert (unloaded.done_reason, unloaded.message.content) == ("unload", "")
    assert stack.model("vision")["state"] == "stopped"


def test_unknown_models_and_management_are_refused(client: ollama.Client, stack: Stack) -> None:
    with pytest.raises(ollama.ResponseError) as unknown:
        client.chat(model="nope", messages=[{"role": "user", "content": "hi"}])
    assert unknown.value.status_code == 404 and unknown.value.error == "model nope not found"
    for call in (
        lambda: client.pull("alpha"),
        lambda: client.push("alpha"),
        lambda: client.delete("alpha"),
        lambda: client.copy("alpha", "beta"),
        lambda: client.create("beta", from_="alpha"),
    ):
        with pytest.raises(ollama.ResponseError) as refused:
            call()
        assert refused.value.status_code == 501
        assert "swapd serves the models its config file names" in refused.value.error
    assert stack.model("alpha")["state"] in ("ready", "stopped")  # nothing was touched


def test_a_bad_request_gets_ollamas_error(stack: Stack) -> None:
    status, _headers, body = post(stack, "/api/chat", {"model": "alpha", "keep_alive": "soon"})
    assert status == 400
    assert json.loads(body)["error"].startswith("invalid keep_alive 'soon'")
    status, _headers, body = post(stack, "/api/chat", {"messages": []})
    assert (status, json.loads(body)) == (400, {"error": "model is required"})


def test_a_keep_alive_past_ollamas_bound_is_a_400_and_ps_still_answers(
    client: ollama.Client, stack: Stack
) -> None:
    """One `keep_alive: 1e12` made `/api/ps` a 500 for every client, and `"inf"` broke `swapd
    status` (issue 40, item 3)."""
    message = [{"role": "user", "content": "hi"}]
    for kept in (1e12, "inf", "2562048h"):
        status, _headers, body = post(
            stack, "/api/chat", {"model": "alpha", "messages": message, "keep_alive": kept}
        )
        assert status == 400 and "invalid keep_alive" in json.loads(body)["error"], body
    longest = client.chat(model="alpha", messages=message, keep_alive="2562047h")
    assert longest.message.content == "hello from alpha"
    [listed] = [m for m in client.ps().models if m.model == "alpha:latest"]
    assert listed.expires_at is not None and listed.expires_at.year > 2300
    assert "alpha" in stack.swapd("status").stdout
    json.loads(stack.swapd("status", "--json").stdout)
    client.chat(model="alpha", messages=message)  # back to its ttl


def test_activity_and_captures_count_ollama_requests(client: ollama.Client, stack: Stack) -> None:
    list(
        client.chat(model="alpha", messages=[{"role": "user", "content": "hi"}], stream=True,
                    options={"x_chunks": 6})
    )  # fmt: skip

    def record() -> dict[str, Any]:
        _status, body = http_get(stack.url + "/api/metrics/activity")
        found = [
            r
            for r in json.loads(body)["data"]
            if r["req_path"] == "/api/chat" and r["tokens"]["output_tokens"] == 6
        ]
        return found[0] if found else {}

    found = wait_for(record, what="the chat's activity record")
    assert found["model"] == "alpha" and found["resp_status_code"] == 200
    assert found["resp_content_type"] == "application/x-ndjson"
    assert found["tokens"]["input_tokens"] == 7
    # Its capture (captureBuffer's default) is the exchange as the client had it: Ollama's.
    assert found["has_capture"] is True
    status, capture = stack.get_json(f"/api/captures/{found['id']}")
    assert status == 200
    request = json.loads(base64.b64decode(capture["req_body"]))
    assert request["options"] == {"x_chunks": 6} and request["model"] == "alpha"
    lines = base64.b64decode(capture["resp_body"]).splitlines()
    assert len(lines) == 7 and json.loads(lines[-1])["done"] is True


# --------------------------------------------------------------------------------------------------
# configuration


def test_api_keys_apply(stack_factory: Callable[..., Stack]) -> None:
    key = "sk-ollama-test-1234"
    port = free_port()
    stack = stack_factory({"apiKeys": [key], "models": {"a": local_model("a", port)}})
    with pytest.raises(ollama.ResponseError) as refused:
        ollama.Client(host=stack.url).list()
    assert refused.value.status_code == 401
    authorised = ollama.Client(host=stack.url, headers={"Authorization": f"Bearer {key}"})
    assert [m.model for m in authorised.list().models] == ["a:latest"]
    reply = authorised.chat(model="a", messages=[{"role": "user", "content": "hi"}])
    assert reply.message.content == "hello from a"


def test_ollama_api_off(stack_factory: Callable[..., Stack]) -> None:
    stack = stack_factory({"ollamaAPI": False, "models": {"a": local_model("a", free_port())}})
    with pytest.raises(ollama.ResponseError) as missing:
        ollama.Client(host=stack.url).list()
    assert missing.value.status_code == 404
    status, _headers, _body = post(stack, "/api/chat", {"model": "a", "messages": []})
    assert status == 404
    assert stack.model("a")["state"] == "stopped"
    status, body = http_get(stack.url + "/api/version")
    assert json.loads(body)["version"] == "0.1.0" and "swapd_version" not in json.loads(body)
    with urllib.request.urlopen(stack.url + "/", timeout=5) as response:
        assert response.url == stack.url + "/ui/"
