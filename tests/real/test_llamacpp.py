"""LLM models on llama.cpp's real server code, driven with the OpenAI SDK and with Ollama's own
client (swapd's Ollama API, translated to llama.cpp's OpenAI routes).

Two models run tests/support/upstreams/llama_server.py (llama.cpp's `llama-server` code, from the
`xllamacpp` wheel) on a small real model, Gemma 3 270M Q4_K_M, each under its own alias; a third
serves embeddings from the same file (llama-server's `--embeddings`); a fourth points at a file
that does not exist. Gemma 270M is a base model, so these tests assert on shapes,
status codes and token counts, never on text; `ignore_eos` makes token counts exact.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ollama
import openai
import pytest

from tests.support.realparts.provision import LlamaCpp
from tests.support.stack import PYTHON, UPSTREAMS, Stack, free_port_range, http_get, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.llamacpp]

LLAMA_SERVER = UPSTREAMS / "llama_server.py"
MODELS = ("gemma-a", "gemma-b")
EMBED = "gemma-embed"
MISSING = "gemma-missing"


def _model(model_id: str, gguf: str, llm: LlamaCpp, *extra: str) -> str:
    return f"""
  {model_id}:
    cmd: >
      {PYTHON} {LLAMA_SERVER} --model {gguf} --port ${{PORT}}
      --threads 1 --ctx 2048 --slots 2 --alias {model_id} {" ".join(extra)}
    env: ["PYTHONPATH={llm.pythonpath}"]
"""


@pytest.fixture(scope="module")
def stack(llamacpp: LlamaCpp) -> Iterator[Stack]:
    stack = Stack("")
    base_port = free_port_range(len(MODELS) + 2)
    stack.ports = range(base_port, base_port + len(MODELS) + 2)  # type: ignore[attr-defined]
    stack.missing = stack.base / "no-such-model.gguf"  # type: ignore[attr-defined]
    config = f"healthCheckTimeout: 120\nstartPort: {base_port}\nmodels:"
    for model_id in MODELS:
        config += _model(model_id, str(llamacpp.gguf), llamacpp)
    config += _model(EMBED, str(llamacpp.gguf), llamacpp, "--embeddings")
    config += _model(MISSING, str(stack.missing), llamacpp)  # type: ignore[attr-defined]
    stack.write_config(config)
    with stack:
        yield stack


@pytest.fixture(scope="module")
def ollama_client(stack: Stack) -> ollama.Client:
    return ollama.Client(host=stack.url, timeout=180)


@pytest.fixture(scope="module")
def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.url + "/v1", api_key="none", max_retries=0, timeout=180)


def post_json(url: str, body: dict[str, Any], timeout: float = 180) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def slots(stack: Stack, model_id: str) -> list[dict[str, Any]]:
    status, body = http_get(f"{stack.url}/upstream/{model_id}/slots", timeout=30)
    assert status == 200, body
    return list(json.loads(body))


def test_chat_without_streaming(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="gemma-a",
        messages=[{"role": "user", "content": "Name a colour."}],
        max_tokens=8,
        extra_body={"ignore_eos": True},
    )
    assert reply.object == "chat.completion"
    assert reply.model == "gemma-a"
    (choice,) = reply.choices
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 8
    assert reply.usage.prompt_tokens > 0


def test_chat_streaming(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="gemma-a",
        messages=[{"role": "user", "content": "Count to ten."}],
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert {c.model for c in chunks} == {"gemma-a"}
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta]
    assert sum(1 for d in deltas if d) >= 2, deltas
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length"
    assert all(f is None for f in finishes[:-1])
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 12


def test_openai_completions(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model="gemma-b", prompt="The capital of France is", max_tokens=6,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert reply.object == "text_completion"
    assert reply.model == "gemma-b"
    (choice,) = reply.choices
    assert isinstance(choice.text, str)
    assert choice.finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 6


def test_llamacpp_native_completion_and_slots(stack: Stack) -> None:
    status, body = post_json(
        stack.url + "/completion",
        {"model": "gemma-a", "prompt": "Once upon a time", "n_predict": 5, "ignore_eos": True},
    )
    assert status == 200, body
    assert isinstance(body["content"], str)
    assert body["tokens_predicted"] == 5
    assert body["stop"] is True
    assert body["stop_type"] == "limit"

    listed = slots(stack, "gemma-a")
    assert [s["id"] for s in listed] == [0, 1]
    # --ctx 2048 shared by --slots 2
    assert {s["n_ctx"] for s in listed} == {1024}
    assert not any(s["is_processing"] for s in listed)


def test_llamacpps_own_errors_reach_the_client_unchanged(stack: Stack) -> None:
    """A request llama.cpp refuses (a prompt longer than a slot's context): the client gets the
    status and the JSON llama.cpp wrote, the same as when asking the server directly."""
    body = {"model": "gemma-a", "prompt": "hello " * 1500, "max_tokens": 1}
    via_swapd = post_json(stack.url + "/v1/completions", body)
    port = stack.model("gemma-a")["port"]
    direct = post_json(f"http://127.0.0.1:{port}/v1/completions", body)
    assert via_swapd == direct
    status, error = via_swapd
    assert status == 400, error
    assert error["error"]["type"] == "exceed_context_size_error", error


def test_swaps_back_and_forth_answer_every_request(client: openai.OpenAI, stack: Stack) -> None:
    def complete(model_id: str) -> str:
        reply = client.completions.create(
            model=model_id, prompt="Hello", max_tokens=2, extra_body={"ignore_eos": True}
        )
        assert reply.usage is not None and reply.usage.completion_tokens == 2
        return reply.model

    for model_id in (*MODELS, *MODELS):
        assert complete(model_id) == model_id
        states = {m: stack.model(m)["state"] for m in MODELS}
        other = next(m for m in MODELS if m != model_id)
        assert states == {model_id: "ready", other: "stopped"}, states

    # Then both at once: each request waits for its model's turn and is answered by it.
    wanted = [*MODELS, *MODELS]
    with ThreadPoolExecutor(len(wanted)) as pool:
        served = list(pool.map(complete, wanted))
    assert served == wanted


def test_the_loading_phase_is_waited_out(client: openai.OpenAI, stack: Stack) -> None:
    """llama.cpp answers /health with 503 "Loading model" while it loads; swapd's health check
    waits that out, so the client sees only the answer."""
    stack.swapd("unload")
    for model_id in MODELS:
        stack.wait_state(model_id, "stopped", timeout=30)
    seen: dict[int, list[tuple[int, str]]] = {p: [] for p in stack.ports}  # type: ignore[attr-defined]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for port in seen:
                try:
                    status, body = http_get(f"http://127.0.0.1:{port}/health", timeout=1)
                except OSError:
                    continue
                seen[port].append((status, body.decode(errors="replace")))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        reply = client.completions.create(
            model="gemma-b", prompt="Hi", max_tokens=3, extra_body={"ignore_eos": True}
        )
    finally:
        done.set()
        watcher.join(5)
    assert reply.usage is not None and reply.usage.completion_tokens == 3
    answers = seen[stack.model("gemma-b")["port"]]
    loading = [b for s, b in answers if s == 503]
    assert loading, f"no 503 seen from gemma-b's /health before it was ready: {answers[:5]}"
    assert all(json.loads(b)["error"]["message"] == "Loading model" for b in loading)


def predicted_total(stack: Stack, model_id: str) -> int:
    """llama.cpp's own count of the tokens it has generated (`/metrics`)."""
    status, body = http_get(f"{stack.url}/upstream/{model_id}/metrics", timeout=30)
    assert status == 200, body
    for line in body.decode().splitlines():
        if line.startswith("llamacpp:tokens_predicted_total "):
            return int(float(line.split()[1]))
    raise AssertionError(f"no tokens_predicted_total in {body[:300]!r}")


def test_a_client_that_disconnects_mid_stream_frees_the_slot(
    client: openai.OpenAI, stack: Stack
) -> None:
    max_tokens = 900  # far more than are decoded before the client goes
    client.completions.create(model="gemma-a", prompt="Hi", max_tokens=1)
    before = predicted_total(stack, "gemma-a")
    stream = client.completions.create(
        model="gemma-a", prompt="Write a long story.", max_tokens=max_tokens, stream=True,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    for got, _chunk in enumerate(stream, 1):
        if got == 3:
            break
    (busy,) = [s for s in slots(stack, "gemma-a") if s["is_processing"]]
    assert busy["params"]["n_predict"] == max_tokens
    stream.close()
    gone_at = time.monotonic()

    wait_for(
        lambda: not any(s["is_processing"] for s in slots(stack, "gemma-a")),
        timeout=60,
        what="llama.cpp to free the slot of the client that went away",
    )
    freed_in = time.monotonic() - gone_at
    generated = predicted_total(stack, "gemma-a") - before
    # llama.cpp stopped generating for nobody: the proxy closed its upstream connection.
    assert 3 <= generated < max_tokens, generated
    wait_for(lambda: stack.model("gemma-a")["in_flight"] == 0, what="swapd to count it done")
    print(f"slot freed {freed_in:.2f}s after the client went, {generated} of {max_tokens} tokens")


def test_a_bad_model_path_gives_an_error_naming_the_file(stack: Stack) -> None:
    missing = str(stack.missing)  # type: ignore[attr-defined]
    status, body = post_json(
        stack.url + "/v1/completions", {"model": MISSING, "prompt": "Hi", "max_tokens": 1}
    )
    assert status == 502, body
    error = body["error"]
    assert error["code"] == "start_failed", error
    assert "exit code 1" in error["message"], error
    tail = "\n".join(error["log_tail"])
    assert f"failed to load model '{missing}'" in tail, tail
    # The message quotes the line that names the file and what went wrong with it, not
    # llama.cpp's generic last words (`exiting due to model loading error`).
    assert f"failed to open GGUF file '{missing}' (No such file or directory)" in error["message"]
    assert "exiting due to" not in error["message"], error
    assert stack.model(MISSING)["state"] == "failed"


# --------------------------------------------------------------------------------------------------
# Ollama's client, through swapd's Ollama API, on llama.cpp's real answers


def _nanoseconds(part: Any) -> dict[str, Any]:
    names = ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration")
    return {name: getattr(part, name) for name in names}


def test_ollama_list_and_show(ollama_client: ollama.Client) -> None:
    names = {m.model for m in ollama_client.list().models}
    assert {"gemma-a:latest", "gemma-b:latest", f"{EMBED}:latest"} <= names
    assert ollama_client.show("gemma-a:latest").capabilities == ["completion"]


def test_ollama_chat_not_streamed(ollama_client: ollama.Client) -> None:
    reply = ollama_client.chat(
        model="gemma-a",
        messages=[{"role": "user", "content": "Name a colour."}],
        options={"num_predict": 8, "ignore_eos": True, "temperature": 0},
    )
    assert reply.model == "gemma-a" and reply.done is True
    assert reply.message.role == "assistant" and isinstance(reply.message.content, str)
    assert reply.done_reason == "length"
    # llama.cpp's own counts and timings, in Ollama's types.
    assert reply.eval_count == 8
    assert isinstance(reply.prompt_eval_count, int) and reply.prompt_eval_count > 0
    figures = _nanoseconds(reply)
    assert all(type(v) is int for v in figures.values()), figures
    assert figures["eval_duration"] > 0 and figures["total_duration"] >= figures["eval_duration"]


def test_ollama_chat_streamed(ollama_client: ollama.Client) -> None:
    parts = list(
        ollama_client.chat(
            model="gemma-a",
            messages=[{"role": "user", "content": "Count to ten."}],
            options={"num_predict": 12, "ignore_eos": True},
            stream=True,
        )
    )
    pieces = [p.message.content for p in parts[:-1]]
    assert len(pieces) >= 2 and all(isinstance(x, str) for x in pieces)
    assert all(p.done is False for p in parts[:-1])
    last = parts[-1]
    assert last.done is True and last.done_reason == "length" and last.eval_count == 12
    assert all(type(v) is int for v in _nanoseconds(last).values())


def test_ollama_generate(ollama_client: ollama.Client) -> None:
    reply = ollama_client.generate(
        model="gemma-b", prompt="Once upon a time", options={"num_predict": 6, "ignore_eos": True}
    )
    assert isinstance(reply.response, str) and reply.eval_count == 6
    raw = list(
        ollama_client.generate(
            model="gemma-b", prompt="The capital of France is", raw=True, stream=True,
            options={"num_predict": 4, "ignore_eos": True},
        )
    )  # fmt: skip
    assert raw[-1].done is True and raw[-1].eval_count == 4


async def test_ollama_async_client(stack: Stack) -> None:
    client = ollama.AsyncClient(host=stack.url, timeout=180)
    parts = [
        p
        async for p in await client.chat(
            model="gemma-a",
            messages=[{"role": "user", "content": "Hi"}],
            options={"num_predict": 5, "ignore_eos": True},
            stream=True,
        )
    ]
    assert parts[-1].done is True and parts[-1].eval_count == 5


def test_ollama_embed(ollama_client: ollama.Client) -> None:
    reply = ollama_client.embed(model=EMBED, input=["a red apple", "a green pear"])
    first, second = reply.embeddings
    assert len(first) == len(second) > 100  # Gemma 3 270M's width
    assert all(isinstance(x, float) for x in first)
    assert first != second
    assert isinstance(reply.prompt_eval_count, int) and reply.prompt_eval_count > 0


def test_ollama_keep_alive_zero_unloads(ollama_client: ollama.Client, stack: Stack) -> None:
    reply = ollama_client.generate(
        model="gemma-a", prompt="Hi", options={"num_predict": 2}, keep_alive=0
    )
    assert reply.done is True
    stack.wait_state("gemma-a", "stopped", timeout=30)
    assert all(m.model != "gemma-a:latest" for m in ollama_client.ps().models)
