"""`sendLoadingState` against the real stack, through the OpenAI SDK's streaming client: a
streaming chat that waits for a swap and a start gets loading messages in `reasoning_content`
deltas (what it waits for, with the seconds elapsed), then the model's own tokens in the same
response; through Ollama's API, driven by Ollama's own client, the same text comes in
`message.thinking` (chat) and `thinking` (generate). The test upstream's `--listen-delay` stands
for a model loading its weights (its health check fails until it listens)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable

import aiohttp
import ollama
import openai
import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack

pytestmark = pytest.mark.processes

# How the phases docs/endpoints.md lists begin ("Loading progress").
PHASES = ("swapping: waiting for ", "starting ", "waking ", "waiting: ")
PHASES += tuple(f"{m} is " for m in ("slow", "plain", "broken"))
PHASES += tuple(f"waiting for {m} to " for m in ("slow", "plain", "broken"))


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
    # Only the documented phases (a bare "waiting for slow" once filled the gaps between them),
    # and no estimate: slow never loaded before.
    phases = re.findall(r"\[\d+\.\ds\] (.*)\n", text)
    assert phases and all(p.startswith(PHASES) for p in phases), phases
    assert "took about" not in text

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


def test_ollamas_client_reads_the_progress_as_thinking(stack: Stack) -> None:
    # Issue 41: through Ollama's API (Open WebUI's Ollama connection) the wait was silent.
    client = ollama.Client(host=stack.url, timeout=60)
    client.chat(model="plain", messages=[{"role": "user", "content": "hi"}])  # slow: a swap
    thinking: list[str] = []
    content: list[str] = []
    for part in client.chat(
        model="slow-alias", messages=[{"role": "user", "content": "hi"}], stream=True
    ):
        assert part.model == "slow-alias"
        if part.message.thinking:
            assert not content, "loading messages come before the model's tokens"
            thinking.append(part.message.thinking)
        if part.message.content:
            content.append(part.message.content)
    text = "".join(thinking)
    assert text.startswith("━━━━━\nswapd loading model: slow\n")
    assert text.index("swapping: waiting for plain to") < text.index("starting slow")
    assert "Done! (" in text and text.endswith("━━━━━\n \n")
    assert "".join(content) == "tok0 tok1 tok2 tok3 tok4 "

    assert "took about" not in text  # its first load: nothing to estimate from

    client.chat(model="plain", messages=[{"role": "user", "content": "hi"}])  # slow stops
    parts = list(client.generate(model="slow", prompt="hi", stream=True))
    said = "".join(p.thinking or "" for p in parts)
    assert said.startswith("━━━━━\nswapd loading model: slow\n") and "Done! (" in said
    # Its second: its first load (the 1.5 s its server took to listen, and the rest) estimates it.
    estimate = re.search(r"\nits last loads took about (\d+\.\d) s\n", said)
    assert estimate is not None and float(estimate.group(1)) >= 1.5, said
    assert "".join(p.response for p in parts) == "tok0 tok1 tok2 tok3 tok4 "
    assert parts[-1].done


def test_ollamas_client_raises_a_failed_start_after_the_progress(stack: Stack) -> None:
    client = ollama.Client(host=stack.url, timeout=60)
    thinking: list[str] = []
    with pytest.raises(ollama.ResponseError) as failed:
        hi = [{"role": "user", "content": "hi"}]
        for part in client.chat(model="broken", messages=hi, stream=True):
            thinking.append(part.message.thinking or "")
    assert "exited during startup with exit code 5" in failed.value.error, failed.value
    assert "".join(thinking).startswith("━━━━━\nswapd loading model: broken\n")


def test_ollamas_client_raises_an_error_after_a_cold_start(stack: Stack) -> None:
    """The model's rejection after the progress lines goes out as Ollama's own error line, not
    as an SSE event inside Ollama's line stream (which Ollama's client cannot read)."""
    client = ollama.Client(host=stack.url, timeout=60)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    thinking: list[str] = []
    assert stack.model("strict")["state"] != "ready"
    with pytest.raises(ollama.ResponseError) as failed:
        hi = [{"role": "user", "content": "hi"}]
        for part in client.chat(model="strict", messages=hi, tools=tools, stream=True):
            thinking.append(part.message.thinking or "")
    assert "tools param requires --jinja flag" in failed.value.error, failed.value
    assert "".join(thinking).startswith("━━━━━\nswapd loading model: strict\n")
