"""Timeouts on bodies and on slow readers (issue 29, item 4), against the real stack, with the
timeouts configured short (`clientBodyTimeout`, `sendTimeout`: 0.5 s) so that the timeout is
what ends each wait: a request whose body stalls gets a 408 and a swap waiting for it proceeds; a
response nobody reads is dropped and an unload waiting for it proceeds; and what makes progress
is never cut: a stream slower than both timeouts, an answer that takes longer, a large body the
proxy holds back while its model starts."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.proxy import in_flight, local_model, model_ports
from tests.support.stack import Stack, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

CHAT = "/v1/chat/completions"


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    a, b = model_ports(2)
    return stack_factory(
        {
            "healthCheckTimeout": 15,
            "clientBodyTimeout": 0.5,
            "sendTimeout": 0.5,
            # The stall's own timeout ends these waits: the minimum rate's grace (0.5 s and a
            # little) would race it on a loaded machine; it has its own tests below.
            "clientBodyMinRate": 0,
            "models": {
                "a": local_model("a", a),
                # Slow to get healthy: a request for it waits a while for its start.
                "b": local_model("b", b, "--health-delay", "1.5"),
            },
        }
    )


def _call(stack: Stack, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(stack.url + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _counters(stack: Stack) -> dict[str, int]:
    return dict(_call(stack, "GET", "/running")[1]["proxy"])


class Later:
    """A call in a thread of its own, whose answer is waited for with a deadline."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.done = threading.Event()

        def run() -> None:
            self.result = call()
            self.done.set()

        threading.Thread(target=run, daemon=True).start()

    def answer(self, timeout: float = 60) -> Any:
        assert self.done.wait(timeout), "still waiting"
        return self.result


def _raw(stack: Stack, head: str, body: bytes = b"", rcvbuf: int = 0) -> socket.socket:
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", stack.port))
    sock.sendall(head.encode() + b"\r\n\r\n" + body)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    sock.settimeout(60)
    data = b""
    try:
        while chunk := sock.recv(1 << 20):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def test_a_stalled_upload_ends_with_a_408_and_the_swap_behind_it_proceeds(stack: Stack) -> None:
    assert _call(stack, "POST", CHAT, {"model": "a", "messages": []})[0] == 200
    host = f"Host: 127.0.0.1:{stack.port}"
    # 10 bytes of a 100,000-byte body, then nothing.
    stalled = _raw(
        stack, f"POST /upstream/a/x HTTP/1.1\r\n{host}\r\nContent-Length: 100000", b"0123456789"
    )
    try:
        wait_for(lambda: in_flight(stack, "a") == 1, 15, what="the upload in flight")
        swap = Later(lambda: _call(stack, "POST", CHAT, {"model": "b", "messages": []}))
        answer = _read_all(stalled)
    finally:
        stalled.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert "clientBodyTimeout" in error["message"]
    status, _ = swap.answer()
    assert status == 200  # b was started once a's drain was over
    assert stack.model("a")["state"] == "stopped" and stack.model("b")["state"] == "ready"
    assert _counters(stack)["body_timeouts"] == 1


def test_a_response_nobody_reads_is_dropped_and_the_unload_behind_it_proceeds(
    stack: Stack,
) -> None:
    assert _call(stack, "POST", CHAT, {"model": "a", "messages": []})[0] == 200
    host = f"Host: 127.0.0.1:{stack.port}"
    # 50 MB asked for, none of it read.
    reader = _raw(stack, f"GET /upstream/a/blob?n=50000000 HTTP/1.1\r\n{host}", rcvbuf=4096)
    try:
        wait_for(lambda: in_flight(stack, "a") == 1, 15, what="the download in flight")
        status, _ = Later(lambda: _call(stack, "POST", "/api/models/unload/a")).answer()
        assert status == 200
        assert stack.model("a")["state"] == "stopped"
        assert _counters(stack)["send_timeouts"] == 1
        got = _read_all(reader)  # what had been queued for it, then the end
        assert 0 < len(got) < 50_000_000
    finally:
        reader.close()


def test_what_makes_progress_is_never_cut(stack: Stack) -> None:
    # A stream whose pieces come further apart than both timeouts, read as it comes.
    with urllib.request.urlopen(stack.url + "/upstream/a/slow?n=3&delay=0.7", timeout=60) as r:
        assert r.read() == b"0\n1\n2\n"
    # An answer that takes longer than both, to a body that came whole.
    status, answer = _call(stack, "POST", CHAT, {"model": "a", "messages": [], "x_delay": 0.7})
    assert status == 200 and answer["choices"]
    # A body larger than the proxy reads ahead of its model (it stops reading: the client is
    # held back, not stalling), sent while its model takes longer than the timeout to start.
    body = b"x" * (4 << 20)
    head = f"POST /upstream/b/x HTTP/1.1\r\nHost: 127.0.0.1:{stack.port}\r\n"
    sock = _raw(stack, head + f"Content-Length: {len(body)}\r\nConnection: close", body)
    try:
        answer = _read_all(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["body_bytes"] == len(body)
    counters = _counters(stack)
    assert counters["body_timeouts"] == 0 and counters["send_timeouts"] == 0


# --- issue 40, item 5: clients that make just enough progress -------------------------------------


def _trickle(sock: socket.socket, every: float, most: int) -> threading.Event:
    """Send one byte every `every` seconds, at most `most` (so a test against a proxy without the
    bound still ends), until the connection is closed; set once it stops."""
    stopped = threading.Event()

    def run() -> None:
        try:
            for _ in range(most):
                if stopped.wait(every):
                    return
                sock.send(b"x")
        except OSError:
            pass  # the proxy closed the connection: what the test waits for
        finally:
            stopped.set()

    threading.Thread(target=run, daemon=True).start()
    return stopped


def _read_slowly(sock: socket.socket, every: float, most: int) -> threading.Event:
    """Read 1 KiB every `every` seconds, at most `most` times, until the connection ends."""
    stopped = threading.Event()

    def run() -> None:
        try:
            for _ in range(most):
                if stopped.wait(every) or not sock.recv(1024):
                    return
        except OSError:
            pass
        finally:
            stopped.set()

    threading.Thread(target=run, daemon=True).start()
    return stopped


def _answer(sock: socket.socket) -> tuple[bytes, dict[str, Any]]:
    answer = _read_all(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, json.loads(body)["error"] if body else {}


def test_a_body_trickled_just_inside_the_stall_timeout_is_cut_by_the_minimum_rate(
    stack_factory: Callable[..., Stack],
) -> None:
    """One byte every 0.3 s never stalls for `clientBodyTimeout` (1 s), so it held its request
    (and any swap behind it) for as long as it trickled; past the grace a body must average
    `clientBodyMinRate` bytes/s."""
    (a,) = model_ports(1)
    stack = stack_factory(
        {"clientBodyTimeout": 1, "clientBodyMinRate": 50, "models": {"a": local_model("a", a)}}
    )
    assert _call(stack, "POST", CHAT, {"model": "a", "messages": []})[0] == 200
    head = f"POST /upstream/a/x HTTP/1.1\r\nHost: 127.0.0.1:{stack.port}\r\nContent-Length: 100000"
    sock = _raw(stack, head)
    trickling = _trickle(sock, 0.3, 100)
    try:
        status, error = _answer(sock)
    finally:
        trickling.set()
        sock.close()
    assert status.startswith(b"HTTP/1.1 408 "), status
    assert "clientBodyMinRate 50 bytes/s" in error["message"], error
    counters = _counters(stack)
    assert counters["slow_bodies"] == 1 and counters["body_timeouts"] == 0


@pytest.fixture
def drained(stack_factory: Callable[..., Stack]) -> Stack:
    """Stall timeouts far longer than the drain's bound, and no minimum rate: only the drain's
    bound can end what the tests' clients hold."""
    a, b = model_ports(2)
    return stack_factory(
        {
            "healthCheckTimeout": 15,
            "clientBodyTimeout": 5,
            "sendTimeout": 5,
            "clientBodyMinRate": 0,
            "drainClientTimeout": 1,
            "models": {"a": local_model("a", a), "b": local_model("b", b)},
        }
    )


def test_a_trickled_upload_holds_a_swap_no_longer_than_the_drain_bound(drained: Stack) -> None:
    stack = drained
    assert _call(stack, "POST", CHAT, {"model": "a", "messages": []})[0] == 200
    head = f"POST /upstream/a/x HTTP/1.1\r\nHost: 127.0.0.1:{stack.port}\r\nContent-Length: 100000"
    sock = _raw(stack, head)
    trickling = _trickle(sock, 0.3, 60)
    try:
        wait_for(lambda: in_flight(stack, "a") == 1, 15, what="the upload in flight")
        swap = Later(lambda: _call(stack, "POST", CHAT, {"model": "b", "messages": []}))
        status, error = _answer(sock)
    finally:
        trickling.set()
        sock.close()
    assert status.startswith(b"HTTP/1.1 408 "), status
    assert "drainClientTimeout" in error["message"], error
    assert swap.answer()[0] == 200  # b started once a's drain was over
    assert stack.model("a")["state"] == "stopped" and stack.model("b")["state"] == "ready"
    counters = _counters(stack)
    assert counters["drain_cuts"] == 1 and counters["body_timeouts"] == 0


def test_a_slow_reader_holds_an_unload_no_longer_than_the_drain_bound(drained: Stack) -> None:
    stack = drained
    assert _call(stack, "POST", CHAT, {"model": "a", "messages": []})[0] == 200
    host = f"Host: 127.0.0.1:{stack.port}"
    # 50 MB asked for, read 1 KiB at a time, never stalling for `sendTimeout`.
    sock = _raw(stack, f"GET /upstream/a/blob?n=50000000 HTTP/1.1\r\n{host}", rcvbuf=4096)
    reading = _read_slowly(sock, 0.2, 100)
    try:
        wait_for(lambda: in_flight(stack, "a") == 1, 15, what="the download in flight")
        status, _ = Later(lambda: _call(stack, "POST", "/api/models/unload/a")).answer()
        assert status == 200 and stack.model("a")["state"] == "stopped"
        assert reading.wait(60), "the connection was not dropped"
    finally:
        reading.set()
        sock.close()
    counters = _counters(stack)
    assert counters["drain_cuts"] == 1 and counters["send_timeouts"] == 0


def test_a_drain_waits_for_what_its_model_keeps_busy(drained: Stack) -> None:
    """A stream whose pieces come further apart than the drain's bound, read as it comes, and a
    request still waiting for its model's answer are the model's doing: the swap waits for them."""
    stack = drained
    assert _call(stack, "POST", CHAT, {"model": "a", "messages": []})[0] == 200
    streamed = Later(lambda: urllib.request.urlopen(stack.url + "/upstream/a/slow?n=4&delay=0.8"))
    slow = Later(lambda: _call(stack, "POST", CHAT, {"model": "a", "messages": [], "x_delay": 3}))
    wait_for(lambda: in_flight(stack, "a") == 2, 15, what="both in flight")
    swap = Later(lambda: _call(stack, "POST", CHAT, {"model": "b", "messages": []}))
    with streamed.answer() as response:
        assert response.read() == b"0\n1\n2\n3\n"
    assert slow.answer()[0] == 200
    assert swap.answer()[0] == 200
    assert _counters(stack)["drain_cuts"] == 0
