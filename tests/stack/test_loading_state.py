"""`sendLoadingState` against the real stack, through the OpenAI SDK's streaming client: a
streaming chat that waits for a swap and a start gets loading messages in `reasoning_content`
deltas (what it waits for, with the seconds elapsed), then the model's own tokens in the same
response. The test upstream's `--listen-delay` stands for a model loading its weights (its
health check fails until it listens)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable

import aiohttp
import openai
import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack

pytestmark = pytest.mark.processes


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    slow, plain, broken, strict = model_ports(4)
    return stack_factory(
        {
            "healthCheckTimeout": 15,
            "sendLoadingState": True,
            "groups": {
                "one": {"members": ["slow", "plain"]},
                "alone": {"swap": False, "exclusive": False, "members": ["broken", "strict"]},
            },
            "models": {
                "slow": local_model("slow", slow, "--listen-delay", "1.5", aliases=["slow-alias"]),
                # The model's own `false` wins over the top level's `true`.
                "plain": local_model("plain", plain, sendLoadingState=False),
                "broken": local_model("broken", broken, "--fail", "--exit-code", "5"),
                # As llama-server without `--jinja`: a chat with `tools` is a 500.
                "strict": local_model("strict", strict, "--no-jinja"),
            },
        }
    )


def _client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0)


def test_the_sdk_streams_loading_then_the_models_tokens(stack: Stack) -> None:
    client = _client(stack)
    # plain is loaded first (no loading messages for it), so slow's start is a swap.
    first = client.chat.completions.create(model="plain", messages=[], stream=True)
    pieces = [(c.choices[0].delta.model_extra or {}).get("reasoning_content") for c in first]
    assert not any(pieces)

    stream = client.chat.completions.create(
        model="slow-alias", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    reasoning: list[str] = []
    content: list[str] = []
    for chunk in stream:
        delta = chunk.choices[0].delta
        thought = (delta.model_extra or {}).get("reasoning_content")
        if thought:
            assert not content, "loading messages come before the model's tokens"
            assert chunk.model == "slow-alias"
            reasoning.append(thought)
        if delta.content:
            content.append(delta.content)
    text = "".join(reasoning)
    assert text.startswith("━━━━━\nswapd loading model: slow\n")
    # What it waited for, in order: the swap (plain stopping), the start, the health check.
    swap = text.index("swapping: waiting for plain to")
    start = text.index("starting slow")
    health = text.index("slow is running; waiting for its health check")
    assert swap < start < health
    assert "s] " in text  # elapsed seconds on each phase
    assert "Done! (" in text and text.endswith("━━━━━\n \n")
    assert "".join(content) == "tok0 tok1 tok2 tok3 tok4 "

    # Ready now: a streaming request gets no loading messages.
    again = client.chat.completions.create(model="slow", messages=[], stream=True)
    assert not any((c.choices[0].delta.model_extra or {}).get("reasoning_content") for c in again)


def test_an_error_after_a_cold_start_raises_in_the_sdk_as_on_a_warm_model(stack: Stack) -> None:
    """The model rejects the request once started (llama-server's `500 tools param requires
    --jinja flag`, which Open WebUI's default tools trigger): after the loading stream's 200 the
    SDK must raise as it does for the warm model's 500, not return an empty answer."""
    client = _client(stack)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "hi"}]

    def ask() -> list[object]:
        return list(
            client.chat.completions.create(
                model="strict",
                messages=messages,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
                stream=True,
            )
        )

    assert stack.model("strict")["state"] != "ready"
    with pytest.raises(openai.APIError, match="tools param requires --jinja flag") as cold:
        ask()
    assert cold.value.body == {
        "code": 500,
        "message": "tools param requires --jinja flag",
        "type": "server_error",
    }
    with pytest.raises(openai.InternalServerError, match="tools param requires --jinja flag"):
        ask()  # warm now: the model's own status


def test_non_streaming_requests_wait_silently(stack: Stack) -> None:
    reply = _client(stack).chat.completions.create(model="slow", messages=[])
    assert reply.choices[0].message.content == "hello from slow"


async def test_a_failed_start_ends_the_stream_with_the_error(stack: Stack) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            stack.url + "/v1/chat/completions",
            json={"model": "broken", "messages": [], "stream": True},
        ) as resp,
    ):
        assert resp.status == 200  # sent before the start failed
        assert resp.headers["Content-Type"] == "text/event-stream"
        body = (await resp.read()).decode()
    events = [line[6:] for line in body.splitlines() if line.startswith("data: ")]
    error = json.loads(events[-1])["error"]
    assert error["code"] == "start_failed"
    assert error["message"].startswith("model broken exited during startup with exit code 5")
    assert any("cannot load its weights" in line for line in error["log_tail"])


def test_v1_models_shows_state_and_ttl_left(stack: Stack) -> None:
    _client(stack).chat.completions.create(model="plain", messages=[])
    with urllib.request.urlopen(stack.url + "/v1/models", timeout=10) as resp:
        models = {m["id"]: m["status"] for m in json.load(resp)["data"]}
    assert models["plain"] == {"value": "loaded", "state": "ready", "ttl": 0, "ttl_left": None}
    assert models["slow"]["state"] == "stopped" and models["slow"]["value"] == "unloaded"
