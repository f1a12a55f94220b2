"""The Playground in Debian's real chromium (Playwright, as tests/real/test_ui_browser.py)
against the real stack, with fake model processes on loopback standing in for llama-server
(tests/support/upstreams/fake_model.py: its stream's chunks and pace are set per request, which a
real server cannot be made to do; tests/real/test_ui_playground_llamacpp.py chats with llama.cpp's
real server). A chat streams, shows swapd's loading progress or the model's state while it waits,
stops and retries, keeps the conversation, and shows its timings; embeddings and transcription
where the model serves them."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for
from tests.support.ui import call, module_shots, shoot, ui_page

pytestmark = [pytest.mark.processes, pytest.mark.browser]

ANSWER = '#playground-view [data-role="answer"]'
TRANSCRIBES = {"in": ["audio"], "out": ["text"]}


@pytest.fixture(scope="module")
def stack(chromium: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    a, slow, late, w = model_ports(4)
    requests = tmp_path_factory.mktemp("requests") / "a.jsonl"
    config = {
        "healthCheckTimeout": 15,
        "models": {
            "a": local_model("a", a, "--request-log", str(requests), ttl=600),
            # Health answers late: a start is seen going on, with the loading progress ...
            "slow": {
                **local_model("slow", slow, "--health-delay", "1.5", ttl=600),
                "sendLoadingState": True,
            },
            # ... or without it (the page shows the model's state from the event stream).
            "late": local_model("late", late, "--health-delay", "1.5", ttl=600),
            "w": {**local_model("w", w, ttl=600), "capabilities": TRANSCRIBES},
        },
    }
    with Stack(config) as running:
        running.requests = requests  # type: ignore[attr-defined]
        yield running


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Path:
    return module_shots(request)


def _bodies(stack: Stack, path: str) -> list[dict[str, Any]]:
    """The JSON bodies `a` received on `path` (its --request-log), in order."""
    log: Path = stack.requests  # type: ignore[attr-defined]
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if entry["raw_path"] == path:
            out.append(json.loads(base64.b64decode(entry["body_b64"])))
    return out


def _record_of(stack: Stack, model: str) -> dict[str, Any]:
    """The newest activity record of `model`, once the daemon has it (records come in
    batches, after the answer's last byte)."""

    def newest() -> dict[str, Any] | None:
        body = call(stack.url + f"/api/metrics/activity?limit=1&model={model}")[2]
        data: list[dict[str, Any]] = json.loads(body)["data"]
        return data[0] if data else None

    record = wait_for(newest, 15, what=f"an activity record of {model}")
    assert record is not None
    return record


def _picked(page: Any, model: str) -> None:
    """Wait until the page knows the models (the event stream's first `modelStatus`) and has
    `model` picked."""
    page.wait_for_selector("#conn.live")
    wait_for(lambda: page.input_value("#pg-model") == model, 15, what=f"{model} picked")


def _option(page: Any, key: str, value: str) -> None:
    settings = "#playground-view details.settings"
    if page.get_attribute(settings, "open") is None:
        page.click(f"{settings} > summary")
    page.fill(f'{settings} [data-option="{key}"]', value)


def _ask(page: Any, text: str) -> None:
    page.fill('#playground-view [data-kind-view="chat"] [data-role="prompt"]', text)
    page.press('#playground-view [data-kind-view="chat"] [data-role="prompt"]', "Enter")


def test_a_chat_streams_with_the_loading_progress_and_its_timings(
    chromium: Path, stack: Stack, shots: Path
) -> None:
    stack.swapd("unload")
    with ui_page(chromium, stack.url + "/ui/#playground/slow") as page:
        _picked(page, "slow")
        _ask(page, "hello")
        # swapd's loading progress (sendLoadingState), while the model starts ...
        loading = page.wait_for_selector(f'{ANSWER} details[data-role="loading"]')
        wait_for(
            lambda: "swapd loading model: slow" in (loading.text_content() or ""),
            15,
            what="the loading text",
        )
        # ... then the model's own stream, and the timings under it.
        page.wait_for_selector(f'{ANSWER}[data-state="done"]', timeout=30_000)
        assert "Done!" in (loading.text_content() or "")
        assert page.get_attribute(f'{ANSWER} details[data-role="loading"]', "open") is None
        assert page.text_content(f'{ANSWER} [data-role="text"]') == "tok0 tok1 tok2 tok3 tok4 "
        tps = page.wait_for_selector(f'{ANSWER} [data-role="tps"]')
        record = _record_of(stack, "slow")
        assert record["wait_ms"] > 0
        # The server's own speed (llama.cpp's `timings`), the figure the activity log keeps.
        assert tps.get_attribute("data-from") == "server"
        assert float(tps.get_attribute("data-tps") or 0) == record["tokens"]["tokens_per_second"]
        assert (tps.text_content() or "").startswith("5 tokens at 50.0 tok/s")
        assert page.query_selector(f'{ANSWER} [data-role="loading-time"]') is not None
        assert page.query_selector(f'{ANSWER} [data-role="ttft"]') is not None
        assert page.get_attribute(f'{ANSWER} [data-role="finish"]', "data-finish") == "stop"
        shoot(page, shots, "desktop-playground-chat")
        assert page.errors == []


def test_stop_retry_and_the_conversation(chromium: Path, stack: Stack) -> None:
    with ui_page(chromium, stack.url + "/ui/#playground/a") as page:
        _picked(page, "a")
        _option(page, "system", "be brief")
        # A long, slow answer (the fake model's own parameters, sent as extra parameters).
        _option(page, "extra", '{"x_chunks": 400, "x_delay": 0.05, "x_tag": "long"}')
        _ask(page, "first")
        page.wait_for_selector(f'{ANSWER} [data-role="text"]:has-text("tok3")')
        page.click('#playground-view button[data-action="stop"]')
        page.wait_for_selector(f'{ANSWER}[data-state="stopped"]')
        assert "tok399" not in (page.text_content(f'{ANSWER} [data-role="text"]') or "")
        # The stop reached the model: it saw its client go.
        wait_for(lambda: "chat long: client gone" in stack.model_log("a"), 15, what="the cut")
        # Retry asks again, in place of the stopped answer.
        _option(page, "extra", '{"x_chunks": 3}')
        page.click(f'{ANSWER} button[data-action="retry"]')
        page.wait_for_selector(f'{ANSWER}[data-state="done"]')
        assert page.locator(ANSWER).count() == 1
        assert page.text_content(f'{ANSWER} [data-role="text"]') == "tok0 tok1 tok2 "
        # Esc stops too; then a follow-up carries the conversation so far.
        _option(page, "extra", '{"x_chunks": 400, "x_delay": 0.05}')
        _ask(page, "second")
        page.wait_for_selector(f'{ANSWER}:nth-of-type(4) [data-role="text"]:has-text("tok2")')
        page.press('#playground-view [data-kind-view="chat"] [data-role="prompt"]', "Escape")
        page.wait_for_selector(f'{ANSWER}:nth-of-type(4)[data-state="stopped"]')
        stopped = page.text_content(f'{ANSWER}:nth-of-type(4) [data-role="text"]') or ""
        _option(page, "extra", '{"x_chunks": 2}')
        _ask(page, "third")
        page.wait_for_selector(f'{ANSWER}:nth-of-type(6)[data-state="done"]')
        messages = _bodies(stack, "/v1/chat/completions")[-1]["messages"]
        assert messages == [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "tok0 tok1 tok2 "},
            {"role": "user", "content": "second"},
            {"role": "assistant", "content": stopped},
            {"role": "user", "content": "third"},
        ]
        assert page.errors == []


def test_without_loading_progress_the_wait_shows_the_models_state(
    chromium: Path, stack: Stack
) -> None:
    stack.swapd("unload")
    with ui_page(chromium, stack.url + "/ui/#playground/late") as page:
        _picked(page, "late")
        _ask(page, "hello")
        waiting = page.wait_for_selector(f'{ANSWER} [data-role="waiting"]:has-text("starting")')
        assert (waiting.text_content() or "").startswith("waiting: late is starting")
        page.wait_for_selector(f'{ANSWER}[data-state="done"]', timeout=30_000)
        assert page.query_selector(f'{ANSWER} [data-role="waiting"]') is None
        assert page.query_selector(f'{ANSWER} details[data-role="loading"]') is None
        assert page.errors == []


def test_an_error_answer_is_shown_and_can_be_retried(chromium: Path, stack: Stack) -> None:
    with ui_page(chromium, stack.url + "/ui/#playground/a") as page:
        _picked(page, "a")
        _option(page, "extra", "[1, 2]")
        _ask(page, "hello")
        error = page.wait_for_selector(f'{ANSWER}[data-state="error"] [data-role="error"]')
        assert error.text_content() == "extra parameters: not a JSON object"
        _option(page, "extra", "")
        page.click(f'{ANSWER} button[data-action="retry"]')
        page.wait_for_selector(f'{ANSWER}[data-state="done"]')
        assert page.errors == []


def test_embeddings_and_transcription_where_the_model_serves_them(
    chromium: Path, stack: Stack, shots: Path
) -> None:
    with ui_page(chromium, stack.url + "/ui/#playground/a") as page:
        _picked(page, "a")
        kinds = "#playground-view [data-kind]"
        offered = page.eval_on_selector_all(kinds, "els => els.map(e => e.dataset.kind)")
        assert offered == ["chat", "completion", "embeddings"]
        page.click('#playground-view [data-kind="embeddings"]')
        view = '#playground-view [data-kind-view="embeddings"]'
        page.fill(f'{view} [data-role="prompt"]', "one\ntwo words")
        page.click(f'{view} button[data-action="send"]')
        page.wait_for_selector(f"{view} tr[data-embedding]")
        dims = page.eval_on_selector_all(
            f'{view} [data-role="dims"]', "els => els.map(e => e.textContent)"
        )
        assert dims == ["3", "3"]  # the fake model's vectors: [0.1, 0.2, len(input)]
        # A model whose capabilities say it transcribes offers that, and only that.
        page.select_option("#pg-model", "w")
        page.wait_for_selector('#playground-view [data-kind="transcription"][aria-pressed="true"]')
        assert page.locator(kinds).count() == 1
        view = '#playground-view [data-kind-view="transcription"]'
        page.set_input_files(
            f'{view} [data-role="file"]',
            files=[{"name": "clip.wav", "mimeType": "audio/wav", "buffer": b"\0" * 1234}],
        )
        page.click(f'{view} button[data-action="send"]')
        text = page.wait_for_selector(f'{view} [data-role="text"]')
        assert text.text_content() == "1234 bytes"  # what the fake model received
        shoot(page, shots, "desktop-playground-transcription")
        assert page.errors == []


def test_a_stream_that_ends_without_a_finish_reason_says_so(chromium: Path, stack: Stack) -> None:
    """A stream cut short (an upstream gone, a shutdown's grace run out) can end like a whole
    one but with no `finish_reason`: the answer says it may have been cut. The browser answers
    the chat here (Playwright's route) with such a stream, which no model can be made to send
    on cue."""
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "a"}
    first = {**chunk, "choices": [{"index": 0, "delta": {"content": "half an"}}]}
    body = f"data: {json.dumps(first)}\n\n"
    with ui_page(chromium, stack.url + "/ui/#playground/a") as page:
        _picked(page, "a")
        page.route(
            "**/v1/chat/completions",
            lambda route: route.fulfill(body=body, content_type="text/event-stream"),
        )
        _ask(page, "hello")
        page.wait_for_selector(f'{ANSWER}[data-state="done"]')
        assert page.text_content(f'{ANSWER} [data-role="text"]') == "half an"
        finish = page.wait_for_selector(f'{ANSWER} [data-role="finish"]')
        assert finish.get_attribute("data-finish") == ""
        assert "cut short" in (finish.text_content() or "")
        assert page.errors == []
