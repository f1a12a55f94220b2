"""`GET /metrics` against the real stack with two proxy processes, parsed with prometheus-client's
own parser: each request counted once whichever process served it and whichever process answers
the scrape; token counts, a start's phases, the per-model gauges; a swap's drain and stop."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.processes

CHAT = "/v1/chat/completions"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(stack: Stack) -> tuple[Samples, str]:
    with urllib.request.urlopen(stack.url + "/metrics", timeout=10) as resp:
        assert resp.status == 200
        content_type = resp.headers["Content-Type"]
        text = resp.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, content_type


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def chat(stack: Stack, model: str) -> int:
    """One request on its own connection (so the kernel spreads them over the processes);
    returns the pid of the proxy process that served the /running after it."""
    body = json.dumps({"model": model, "messages": []}).encode()
    req = urllib.request.Request(
        stack.url + CHAT, data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        resp.read()
    with urllib.request.urlopen(stack.url + "/running", timeout=5) as resp:
        return int(json.load(resp)["proxy"]["pid"])


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    a, b = model_ports(2)
    return stack_factory(
        {"healthCheckTimeout": 15, "models": {"a": local_model("a", a), "b": local_model("b", b)}},
        proxy_processes=2,
    )


def test_requests_counted_once_across_two_proxy_processes(stack: Stack) -> None:
    # Both processes accept from one listening socket, and which one the kernel wakes is not
    # random: on a busy machine one of them can take 30 connections in a row. So requests go on
    # until both have served (at least 30, at most 300).
    pids: list[int] = []
    while len(pids) < 30 or len(set(pids)) < 2:
        assert len(pids) < 300, f"only {set(pids)} served 300 requests"
        pids.append(chat(stack, "a"))
    n = len(pids)
    ok = {"model": "a", "route": "model", "status": "200"}

    def counted() -> Samples | None:
        samples, _ = scrape(stack)
        return samples if value(samples, "swapd_requests_total", **ok) >= n else None

    samples = wait_for(counted, 10, what=f"{n} requests counted")
    # Every scrape (either process answers) says the same: n, not 2n.
    for _ in range(6):
        again, content_type = scrape(stack)
        assert content_type.startswith("text/plain; version=0.0.4")
        assert value(again, "swapd_requests_total", **ok) == n
    assert value(samples, "swapd_request_duration_seconds_count", model="a", route="model") == n
    assert value(samples, "swapd_request_ttfb_seconds_count", model="a", route="model") == n
    # The first request waited for the start.
    assert value(samples, "swapd_request_wait_seconds_count", model="a") >= 1
    # The test upstream reports 1 prompt and 3 generated tokens, at 100 and 50 tokens/s.
    assert value(samples, "swapd_tokens_total", model="a", kind="prompt") == n
    assert value(samples, "swapd_tokens_total", model="a", kind="generated") == 3 * n
    assert value(samples, "swapd_generation_tokens_per_second_count", model="a") == n
    assert value(samples, "swapd_generation_tokens_per_second_bucket", model="a", le="50.0") == n
    assert value(samples, "swapd_model_starts_total", model="a", result="ok") == 1
    for phase in ("start", "health"):
        assert value(samples, "swapd_swap_phase_seconds_count", model="a", phase=phase) == 1
    assert value(samples, "swapd_model_loaded", model="a") == 1
    assert value(samples, "swapd_model_loaded", model="b") == 0
    assert value(samples, "swapd_model_state", model="a", state="ready") == 1
    assert value(samples, "swapd_in_flight_requests", model="a") == 0
    assert value(samples, "swapd_queue_depth", model="a") == 0

    # A swap to b drains and stops a first.
    chat(stack, "b")
    samples = wait_for(
        lambda: (
            (s := scrape(stack)[0])
            and value(s, "swapd_model_starts_total", model="b", result="ok") == 1
            and s
        ),
        10,
        what="b's start counted",
    )
    for phase in ("drain", "stop"):
        assert value(samples, "swapd_swap_phase_seconds_count", model="a", phase=phase) == 1
    assert value(samples, "swapd_swaps_total", model="a") == 1
    # The stop's cause, carried from the scheduler as it is (never read from its words).
    assert value(samples, "swapd_model_stops_total", model="a", cause="swap") == 1
    assert value(samples, "swapd_model_loaded", model="a") == 0
    assert value(samples, "swapd_model_loaded", model="b") == 1


def _post(stack: Stack, model: str) -> tuple[int, dict[str, object]]:
    body = json.dumps({"model": model, "messages": []}).encode()
    req = urllib.request.Request(
        stack.url + CHAT, data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_start_failures_backoff_and_crashes(stack_factory: Callable[..., Stack]) -> None:
    broken, crashy = model_ports(2)
    stack = stack_factory(
        {
            "healthCheckTimeout": 15,
            "groups": {"g": {"swap": False, "exclusive": False, "members": ["broken", "crashy"]}},
            "models": {
                "broken": local_model("broken", broken, "--fail", "--exit-code", "7"),
                "crashy": local_model("crashy", crashy, "--exit-after", "1.5"),
            },
        }
    )
    status, body = _post(stack, "broken")
    assert status == 502
    error = body["error"]
    assert isinstance(error, dict)
    # The message names the cause from the model's output (the error line, not its last line).
    assert error["message"] == (
        "model broken exited during startup with exit code 7: error: broken cannot load its weights"
    )
    assert error["log_tail"][-1] == "fake model broken: exiting"
    for _ in range(2):
        assert _post(stack, "broken")[0] == 502
    assert _post(stack, "broken")[0] == 503  # backing off after three failures in a row

    assert _post(stack, "crashy")[0] == 200
    stack.wait_state("crashy", "stopped", timeout=15)
    samples = wait_for(
        lambda: (
            (s := scrape(stack)[0]) and value(s, "swapd_model_crashes_total", model="crashy") and s
        ),
        10,
        what="the crash counted",
    )
    assert value(samples, "swapd_model_starts_total", model="broken", result="failed") == 3
    assert value(samples, "swapd_model_backoffs_total", model="broken") == 1
    assert value(samples, "swapd_model_crashes_total", model="crashy") == 1
    assert value(samples, "swapd_model_stops_total", model="crashy", cause="crash") == 1
    assert value(samples, "swapd_model_starts_total", model="crashy", result="ok") == 1
    assert value(samples, "swapd_requests_total", model="broken", route="model", status="502") == 3
    assert value(samples, "swapd_requests_total", model="broken", route="model", status="503") == 1


def test_unknown_model_names_share_one_label_and_never_show_a_key(
    stack_factory: Callable[..., Stack],
) -> None:
    """Issue 29, finding 2: each 404 for a new name used to add ~90 series to `/metrics` for
    good (20,000 names: scrapes 503, the daemon at 1.2 GB), and a key sent as the model name
    became a label. Now every name the config does not have counts under `(other)`."""
    key = f"sk-metrics-{uuid.uuid4().hex}"
    auth = {"Authorization": f"Bearer {key}"}
    (port,) = model_ports(1)
    stack = stack_factory(
        {"healthCheckTimeout": 15, "apiKeys": [key], "models": {"a": local_model("a", port)}}
    )

    def send(model: str) -> int:
        body = json.dumps({"model": model, "messages": []}).encode()
        req = urllib.request.Request(
            stack.url + CHAT, data=body, headers={"Content-Type": "application/json", **auth}
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def scrape_text(other: int) -> str:
        """`/metrics` once it counts `other` requests under `(other)`."""

        def counted() -> str | None:
            req = urllib.request.Request(stack.url + "/metrics", headers=auth)
            with urllib.request.urlopen(req, timeout=10) as resp:
                text = resp.read().decode()
            samples = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }
            labels = {"model": "(other)", "route": "model", "status": "404"}
            return text if value(samples, "swapd_requests_total", **labels) == other else None

        return wait_for(counted, 10, what=f"{other} requests counted under (other)")

    assert send("a") == 200
    assert send("no-such-model-0") == 404
    before = scrape_text(1)
    names = 300
    for i in range(1, names):
        assert send(f"no-such-model-{i}-{uuid.uuid4().hex[:6]}") == 404
    assert send(key) == 404  # a client that sends its key as the model name
    after = scrape_text(names + 1)

    assert key not in after
    assert "no-such-model" not in after
    # The same series as after one unknown name: only the numbers in them changed.
    assert len(after.splitlines()) == len(before.splitlines())
    # The activity log has each request all the same, under the name asked.
    req = urllib.request.Request(stack.url + "/api/metrics/activity?limit=5", headers=auth)
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert json.load(resp)["total"] == names + 2
