"""The two-phase drain through the real daemon and proxy: a swap waits for the request in flight on
the model it evicts, and the streamed response arrives whole."""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest

from tests.support.daemon import chat, config
from tests.support.stack import fake_model_cmd

pytestmark = pytest.mark.processes


@pytest.mark.parametrize("proxies", [1, 2])
def test_a_swap_never_cuts_a_request_in_flight(stack_factory, proxies: int) -> None:
    stack = stack_factory(
        config(
            {"alpha": {"cmd": fake_model_cmd("alpha")}, "beta": {"cmd": fake_model_cmd("beta")}}
        ),
        proxy_processes=proxies,
    )
    chat(stack.url, "alpha")
    chunks: list[bytes] = []
    times: dict[str, float] = {}
    first_chunk = threading.Event()

    def stream() -> None:
        url = stack.url + "/upstream/alpha/slow?n=20&delay=0.1"
        with urllib.request.urlopen(url, timeout=30) as response:
            while line := response.readline():
                chunks.append(line.strip())
                first_chunk.set()
        times["stream_done"] = time.monotonic()

    thread = threading.Thread(target=stream)
    thread.start()
    assert first_chunk.wait(10)
    times["swap_asked"] = time.monotonic()
    served = chat(stack.url, "beta")["served_by"]
    times["beta_served"] = time.monotonic()
    thread.join()

    assert chunks == [str(i).encode() for i in range(20)], "the stream was cut"
    assert served["name"] == "beta"
    # beta could only start after alpha was drained, i.e. after the stream had finished.
    assert times["beta_served"] >= times["stream_done"]
    assert times["stream_done"] - times["swap_asked"] > 1.0
    alpha = stack.model("alpha")
    assert alpha["state"] == "stopped" and alpha["reason"] == "swapped out for beta"
