"""SIGTERM to swapd (`swapd run --shutdown-grace`, CONTRACTS C2): it stops admitting, lets the
requests in flight finish for up to the grace, and only then stops the models."""

from __future__ import annotations

import http.client
import signal
import threading
import time

import pytest

from tests.support.daemon import chat, config
from tests.support.stack import fake_model_cmd

pytestmark = pytest.mark.processes


def _stream(port: int, path: str, chunks: list[bytes], first: threading.Event) -> dict[str, object]:
    """GET `path` and read the chunked body to its end; what happened."""
    result: dict[str, object] = {}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        result["status"] = response.status
        while line := response.readline():
            chunks.append(line.strip())
            first.set()
        result["clean_end"] = True
    except (http.client.IncompleteRead, ConnectionError, OSError) as exc:
        result["error"] = repr(exc)
    finally:
        conn.close()
        first.set()
    result["ended"] = time.monotonic()
    return result


def _stream_in_thread(port: int, path: str) -> tuple[threading.Thread, list[bytes], dict]:
    chunks: list[bytes] = []
    first = threading.Event()
    outcome: dict[str, object] = {}
    thread = threading.Thread(target=lambda: outcome.update(_stream(port, path, chunks, first)))
    thread.start()
    assert first.wait(15), "no first chunk"
    return thread, chunks, outcome


def test_a_request_in_flight_finishes_before_the_models_stop(stack_factory) -> None:
    # The model stops at once on SIGTERM, as most servers do; the default grace (30 s) applies.
    stack = stack_factory(config({"m": {"cmd": fake_model_cmd("m", "--sigterm-exits")}}))
    chat(stack.url, "m")
    thread, chunks, outcome = _stream_in_thread(stack.port, "/upstream/m/slow?n=20&delay=0.1")
    assert stack.proc is not None
    stack.proc.send_signal(signal.SIGTERM)
    thread.join(30)
    assert chunks == [str(i).encode() for i in range(20)], outcome  # not cut
    assert outcome.get("clean_end"), outcome
    assert stack.proc.wait(40) == 0


def test_a_stream_still_running_at_the_end_of_the_grace_is_ended_cleanly(stack_factory) -> None:
    # Here the daemon stops the model at the end of the grace and the proxy closes the stream the
    # model ended; with the proxy side of C2 (branch issue9) the proxy ends it itself at the grace.
    stack = stack_factory(
        config({"m": {"cmd": fake_model_cmd("m", "--sigterm-exits")}}),
        run_args=("--shutdown-grace", "2"),
    )
    chat(stack.url, "m")
    thread, chunks, outcome = _stream_in_thread(stack.port, "/upstream/m/slow?n=300&delay=0.1")
    assert stack.proc is not None
    signalled = time.monotonic()
    stack.proc.send_signal(signal.SIGTERM)
    thread.join(40)
    assert outcome.get("clean_end"), outcome  # the chunked stream was terminated, not reset
    assert 0 < len(chunks) < 300
    assert 1.5 < float(outcome["ended"]) - signalled < 4.5, outcome  # type: ignore[arg-type]
    assert stack.proc.wait(40) == 0
