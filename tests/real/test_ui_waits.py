"""Every wait and every failure explained, in Debian's real chromium (Playwright) against the real
stack: a model held by its `busyCheck` through a job (the ComfyUI-like upstream standing in for
ComfyUI, as tests/stack/test_busy_check_comfyui.py) says why it is held and until when; a swap
that waits for it is shown, with what it waits for, on the cards, the model pages and the
Playground and the Activity tab's in-flight row, and its row on the Swaps page says how long its
request waited and for what; a model killed by a signal as it starts says which signal. What the
page shows is checked against swapd's own `/api/status` and `/api/swaps`."""

from __future__ import annotations

import json
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.comfyui import MODEL, ComfyUpstream, comfyui_model_yaml, free_port_run
from tests.support.stack import Stack, fake_model_cmd, wait_for
from tests.support.ui import PHONE, call, module_shots, shoot, ui_page

pytestmark = [pytest.mark.processes, pytest.mark.browser]

LLM = "llm"
TTL = 20
SIGILL = "sigill"


@pytest.fixture(scope="module")
def stack(chromium: Path) -> Iterator[Stack]:  # no browser, no stack: skipped before it starts
    stack = Stack("")
    up = ComfyUpstream(stack.base, MODEL)
    stack.up = up  # type: ignore[attr-defined]
    comfy = comfyui_model_yaml(up, ttl=TTL, extra="    busyCheck: comfyui\n")
    llm = f"  {LLM}:\n    cmd: {fake_model_cmd(LLM)}\n    sendLoadingState: true\n"
    # A server killed by SIGILL as it loads (a binary built for another CPU does that).
    killed = "import os, signal; print('loading tensors', flush=True); os.kill(os.getpid(), 4)"
    sigill = (
        f'  {SIGILL}:\n    cmd: {sys.executable} -c "{killed}"\n    proxy: http://127.0.0.1:9\n'
    )
    stack.write_config(
        f"healthCheckTimeout: 15\nstartPort: {free_port_run(3)}\nmodels:\n{comfy}{llm}{sigill}"
    )
    with stack:
        yield stack


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Path:
    return module_shots(request)


def _post(stack: Stack, path: str, body: Any) -> Any:
    status, _, answer = call(stack.url + path, method="POST", body=body)
    assert status == 200, (path, answer)
    return json.loads(answer) if answer.strip() else None


def _busy_job(stack: Stack) -> None:
    """ComfyUI loaded and running a job that never ends, until the test interrupts it."""
    status, _, _ = call(stack.url + "/comfyui/")
    assert status == 200
    prompt = {
        "prompt": {"3": {"class_type": "KSampler", "inputs": {"steps": 1}}},
        "client_id": "render",
        "extra_data": {"x_steps": -1, "x_step_delay": 0.2},
    }
    _post(stack, "/comfyui/api/prompt", prompt)
    wait_for(lambda: (stack.model(MODEL).get("busy") or {}).get("busy"), 15, what="busy")


def _ask_in_background(stack: Stack) -> tuple[threading.Thread, list[str]]:
    """A streamed chat for `llm` (with its loading progress), read to its end in a thread."""
    body = {"model": LLM, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    out: list[str] = []

    def ask() -> None:
        request = urllib.request.Request(
            stack.url + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            out.append(response.read().decode())

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread, out


def test_a_held_model_and_a_waiting_swap_are_shown_with_their_reasons(
    chromium: Path, stack: Stack, shots: Path
) -> None:
    _busy_job(stack)
    asking, said = _ask_in_background(stack)
    waiting = wait_for(lambda: stack.model(LLM).get("waiting"), 15, what="the swap's wait")
    assert waiting["holding"] == [MODEL]
    comfy, llm = f'article[data-model="{MODEL}"]', f'article[data-model="{LLM}"]'
    with ui_page(chromium, stack.url + "/ui/") as page:
        # The busy model: busy, why, whose swap it holds back and until when, its TTL held.
        page.wait_for_selector(f'{comfy} [data-role="busy-badge"]')
        busy = page.text_content(f'{comfy} dd[data-role="busy"]') or ""
        assert "upstream reports 1 running job" in busy
        holds = page.text_content(f'{comfy} dd[data-role="holds"]') or ""
        assert holds.startswith(f"the swap to {LLM}, until ") and holds.endswith(" left)")
        facts = page.text_content(f"{comfy} .facts") or ""
        assert f"TTL{TTL} s (not counting: busy)" in facts
        assert "requests in flight" not in facts
        # The model the swap is for: waiting, for what, and until when at most.
        page.wait_for_selector(f'{llm} [data-role="waiting-badge"]')
        shown = page.text_content(f'{llm} dd[data-role="waiting"]') or ""
        assert f": {MODEL} is busy (busyCheck); at most " in shown and shown.endswith(" more")
        shoot(page, shots, "desktop-models-busy-and-waiting")

        # The busy model's page: its busyCheck's reading, the last poll moving on.
        page.evaluate("name => { location.hash = name; }", f"model/{MODEL}")
        panel = '#model-view [data-role="busy"]'
        page.wait_for_selector(f'{panel} dl[data-busy="busy"]')
        polled = page.text_content(f"{panel} dl") or ""
        # Its head: how long it has been busy counts from its busyCheck's spell, not from its
        # state's change (it said "busy for 42 s" of a model busy for 20).
        busy_since = stack.model(MODEL)["busy"]["since"]
        head = page.get_attribute('#model-view [data-role="busy-for"] [data-since]', "data-since")
        assert float(head or 0) == pytest.approx(busy_since)
        assert (page.text_content('#model-view [data-role="busy-for"]') or "").startswith(
            "busy for "
        )
        assert f"holds backthe swap to {LLM}, until " in polled
        assert "last poll" in polled
        wait_for(
            lambda: _last_poll(page) != _last_poll_of(polled),
            15,
            what="the last poll shown to move on",
        )
        shoot(page, shots, "desktop-model-busy")
        # The waiting model's page says what its swap waits for.
        page.evaluate("name => { location.hash = name; }", f"model/{LLM}")
        page.wait_for_selector('#model-view dd[data-role="waiting"]')
        assert f"{MODEL} is busy" in (
            page.text_content('#model-view dd[data-role="waiting"]') or ""
        )
        shoot(page, shots, "desktop-model-waiting")

        # The Activity tab's in-flight row says what its request waits for.
        page.evaluate("name => { location.hash = name; }", "activity")
        flight = f'#inflight tr[data-inflight] [data-role="waiting"]:has-text("{MODEL} is busy")'
        waits = page.wait_for_selector(flight)
        assert f": {MODEL} is busy (busyCheck); at most " in (waits.text_content() or "")
        shoot(page, shots, "desktop-activity-waiting")

        # The Playground, asked for the same model, says what the request waits for.
        page.evaluate("name => { location.hash = name; }", f"playground/{LLM}")
        wait_for(lambda: page.input_value("#pg-model") == LLM, 15, what=f"{LLM} picked")
        prompt = '#playground-view [data-kind-view="chat"] [data-role="prompt"]'
        page.fill(prompt, "hello")
        page.press(prompt, "Enter")
        answer = '#playground-view [data-kind-view="chat"] [data-role="answer"]'
        line = page.wait_for_selector(f'{answer} .waiting:has-text("is busy")')
        assert f"{MODEL} is busy (busyCheck); at most" in (line.text_content() or "")
        page.wait_for_selector(f'{answer} details[data-role="loading"]:has-text("its work")')
        shoot(page, shots, "desktop-playground-waiting")

        # The job ends: the swap goes ahead, and its row says what its request waited for. It
        # is ended at ComfyUI's own port, as from another of its clients: sent through swapd,
        # the interrupt is itself a request in flight for the model, which the swap may find
        # there too (the proxy tells a model's idle edge once it stayed idle 50 ms).
        port = stack.model(MODEL)["port"]
        status, _, _ = call(f"http://127.0.0.1:{port}/api/interrupt", method="POST", body=None)
        assert status == 200
        asking.join(60)
        assert said and f"waiting for {MODEL} to finish its work (busyCheck: busy)" in said[0]
        page.wait_for_selector(f'{answer}[data-state="done"]', timeout=60_000)
        records = json.loads(call(stack.url + "/api/swaps")[2])["swaps"]
        swap = [r for r in records if r["model"] == LLM and r["kind"] == "swap"][-1]
        page.evaluate("name => { location.hash = name; }", "swaps")
        row = f'#swap-table tr[data-swap="{swap["id"]}"]'
        page.wait_for_selector(row)
        assert page.text_content(f'{row} [data-role="waited"]') == (
            f"request waited {_seconds(swap['waited'])}"
        )
        assert page.text_content(f'{row} [data-role="waited-for"]') == f"for: busy: {MODEL}"
        (stop,) = swap["folded"]
        assert page.query_selector(f'#swap-table tr[data-swap="{stop}"]') is None
        assert page.text_content(f"{row} td:nth-child(2)") == f"{MODEL} → {LLM}"
        shoot(page, shots, "desktop-swaps-waited")
        assert page.errors == []


SIGILL_CARD = f'article[data-model="{SIGILL}"]'


def _last_poll_of(text: str) -> str:
    return text.split("last poll", 1)[1][:8]


def _last_poll(page: Any) -> str:
    return _last_poll_of(page.text_content('#model-view [data-role="busy"] dl') or "last poll")


def _seconds(s: float) -> str:
    """dom.js' `seconds()` for the times a swap takes (under a minute here)."""
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.{2 if s < 10 else 1}f} s"


def test_a_start_killed_by_a_signal_says_which(chromium: Path, stack: Stack, shots: Path) -> None:
    with ui_page(chromium, stack.url + "/ui/") as page:
        page.wait_for_selector(f'{SIGILL_CARD} button[data-action="load"]')
        page.click(f'{SIGILL_CARD} button[data-action="load"]')
        reason = page.wait_for_selector(f'{SIGILL_CARD}[data-state="failed"] [data-role="reason"]')
        assert (reason.text_content() or "") == (
            f"model {SIGILL} exited during startup, killed by SIGILL (illegal instruction)"
        )
        page.wait_for_timeout(300)  # the toast of the failed load
        shoot(page, shots, "desktop-models-killed-by-signal")
        assert page.errors == []
    # The same words in the daemon's status and the model's page.
    assert stack.model(SIGILL)["reason"].endswith("killed by SIGILL (illegal instruction)")


def test_the_logs_page_opens_at_the_newest_line_at_phone_width(
    chromium: Path, stack: Stack, shots: Path
) -> None:
    # More lines than the box holds: each request ComfyUI's stand-in answers is a line of its log.
    assert call(stack.url + "/comfyui/")[0] == 200
    for _ in range(60):
        assert call(stack.url + "/comfyui/api/system_stats")[0] == 200
    with ui_page(chromium, stack.url + "/ui/#logs", viewport=PHONE) as page:
        page.wait_for_selector("#log .line")
        wait_for(
            lambda: page.eval_on_selector(
                "#log", "n => n.scrollHeight > n.clientHeight && n.scrollTop > 0"
            ),
            15,
            what="a log longer than its box",
        )
        assert page.eval_on_selector(
            "#log", "n => n.scrollHeight - n.scrollTop - n.clientHeight < 24"
        )
        shoot(page, shots, "phone-logs")
        assert page.errors == []


def test_the_pages_with_waits_at_phone_width(chromium: Path, stack: Stack, shots: Path) -> None:
    """The rows and cards the waits added, at phone width: nothing wider than the screen."""
    for name in ("models", "swaps", f"model/{MODEL}"):
        with ui_page(chromium, stack.url + f"/ui/#{name}", viewport=PHONE) as page:
            page.wait_for_selector("#conn.live")
            page.wait_for_selector(f"#page-{name.split('/')[0]}:not([hidden])")
            page.wait_for_timeout(300)
            shoot(page, shots, f"phone-{name.replace('/', '-')}")
            assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
            assert page.errors == []
