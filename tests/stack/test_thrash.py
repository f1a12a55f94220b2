"""No one client thrashes the GPU for everyone (docs/swapping.md), through the real stack: while two
clients chat with `a`, a third asks for `b` and `c` alternately every 100 ms, for longer than
collation could hold a swap back (maxWait, 5 s), with `POST /api/models/load/<m>?wait=false`. Its
loads cause no swap while `a` is in use: `a` is started once, every chat is served by that one
process, and `b`, `c` wait, saying why (`unwatched`); once the chats end, the load goes. The same
with chats for `b` and `c` that the third client abandons after 50 ms: each waits for its swap
while its client is there (the daemon sees `a` in use between the chatting clients' requests),
then leaves a swap nobody waits for. And a chat whose client went away while it waited counts as
waiting no more. Nor does Ollama's `keep_alive: 0` for `a` itself, every 100 ms, unload it under
them: `a` unloads once it is no longer in use."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import chat, config
from tests.support.stack import Stack, fake_model_cmd, wait_for

pytestmark = pytest.mark.processes

LOADS = 60  # at 100 ms apart: 6 s, past the 5 s maxWait
PACE = 0.1  # the thrashing client's own pace (the workload, not a wait for the system)


def _model(name: str) -> dict[str, Any]:
    return {"cmd": fake_model_cmd(name)}


def _abandon(stack: Stack, model: str) -> int:
    """A chat whose client goes away after 50 ms, before its model answered."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    conn = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=0.05)
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        return conn.getresponse().status  # a model that was ready answered in time
    except TimeoutError:
        return 0
    finally:
        conn.close()


def _stream(stack: Stack, body: dict[str, Any]) -> None:
    """A streamed chat read to its end."""
    request = urllib.request.Request(
        stack.url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


def _ollama(stack: Stack, path: str, body: dict[str, Any]) -> int:
    """An Ollama API call, answered in full; its status."""
    request = urllib.request.Request(
        stack.url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
        return response.status


def _post(stack: Stack, path: str) -> int:
    request = urllib.request.Request(stack.url + path, data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status


class Chatting:
    """Two clients chatting with `a` back to back, each sending its next request as soon as it
    read the last answer, in threads, until `stop`; the pids that served them are kept."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.stop = threading.Event()
        self.served: list[int] = []
        self.failures: list[BaseException] = []
        self.threads = [threading.Thread(target=self._chat) for _ in range(2)]

    def _chat(self) -> None:
        while not self.stop.is_set():
            try:
                self.served.append(int(chat(self.stack.url, "a")["served_by"]["pid"]))
            except BaseException as exc:  # reported by `end`, with the counts
                self.failures.append(exc)
                return

    def __enter__(self) -> Chatting:
        for t in self.threads:
            t.start()
        wait_for(lambda: len(self.served) >= 10, what="the chats under way")
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def _started(stack: Stack) -> list[tuple[str, str]]:
    """The swap log's starts (with or without evictions), in order."""
    _, swaps = stack.get_json("/api/swaps")
    return [(r["kind"], r["model"]) for r in swaps["swaps"] if r["kind"] in ("start", "swap")]


def test_loads_nobody_waits_for_cause_no_swap_while_others_chat(
    stack_factory, tmp_path: Path
) -> None:
    stack: Stack = stack_factory(config({m: _model(m) for m in ("a", "b", "c")}))
    chat(stack.url, "a")
    pid = stack.model("a")["pid"]
    with Chatting(stack) as chatting:
        statuses = []
        for i in range(LOADS):
            statuses.append(_post(stack, f"/api/models/load/{'bc'[i % 2]}?wait=false"))
            time.sleep(PACE)
        # Still chatting: the thrasher's loads have swapped nothing out.
        b, c = stack.model("b"), stack.model("c")
        assert (b["state"], c["state"]) == ("stopped", "stopped"), (b, c)
        assert stack.model("a")["pid"] == pid
        waiting = [m["waiting"] for m in (b, c) if m["waiting"] is not None]
        assert waiting and all(w["cause"] == "unwatched" for w in waiting), waiting
        assert all(w["serving"] == ["a"] for w in waiting), waiting
    assert not chatting.failures, chatting.failures
    assert set(statuses) == {202}
    # Every chat was served by the one process of a: none waited for a swap.
    assert set(chatting.served) == {pid}, set(chatting.served)
    # Once nobody chats, the load goes.
    wait_for(
        lambda: "ready" in (stack.model("b")["state"], stack.model("c")["state"]),
        timeout=30,
        what="the thrasher's load once a is idle",
    )


def test_a_request_whose_client_went_away_leaves_a_swap_nobody_waits_for(
    stack_factory, tmp_path: Path
) -> None:
    """A chat for `b` whose client leaves after 50 ms, while a long request keeps `a` busy: the
    proxy tells the daemon (`GaveUp`), so once b's collation (its maxWait, 1 s) is over its swap
    still takes out no model in use, and says so; it goes once `a` is idle."""
    models = {"a": _model("a"), "b": {**_model("b"), "maxWait": 1}}
    stack: Stack = stack_factory(config(models))
    long = {"model": "a", "x_delay": 1, "x_chunks": 8, "stream": True}
    busy = threading.Thread(target=_stream, args=(stack, long))
    busy.start()
    try:
        wait_for(lambda: stack.model("a")["in_flight"] > 0, what="a's request in flight")
        assert _abandon(stack, "b") == 0
        waiting = wait_for(
            lambda: (
                (w := stack.model("b")["waiting"]) is not None and w["cause"] == "unwatched" and w
            ),
            timeout=20,
            what="b's swap to yield to a once nobody waits for it",
        )
        assert waiting["serving"] == ["a"]
        assert stack.model("a")["state"] == "ready"
    finally:
        busy.join(30)
    stack.wait_state("b", "ready", timeout=30)


def test_chats_abandoned_after_50_ms_cause_no_swap_while_others_chat(
    stack_factory, tmp_path: Path
) -> None:
    """The thrasher's chats for `b` and `c`, each abandoned after 50 ms, alternately every
    100 ms for longer than `maxWait`: each swap it asks for waits while its client is there (the
    daemon sees `a` in use between the chatting clients' requests: the proxy tells a model's
    idle->busy edge at once and its busy->idle edge only once it stays idle), and once its client
    left, the swap is one nobody waits for; asked again, its `maxWait` counts from then. No swap,
    counted in the swap log."""
    stack: Stack = stack_factory(config({m: _model(m) for m in ("a", "b", "c")}))
    chat(stack.url, "a")
    pid = stack.model("a")["pid"]
    with Chatting(stack) as chatting:
        answered = []
        for i in range(LOADS):
            answered.append(_abandon(stack, "bc"[i % 2]))
            time.sleep(PACE)
        assert _started(stack) == [("start", "a")]
        assert stack.model("a")["pid"] == pid
    assert not chatting.failures, chatting.failures
    assert set(answered) == {0}  # none of the thrasher's chats was served
    assert set(chatting.served) == {pid}, set(chatting.served)


def test_ollamas_keep_alive_0_unloads_no_model_others_chat_with(
    stack_factory, tmp_path: Path
) -> None:
    """A third client sends Ollama's `keep_alive: 0` for `a` every 100 ms, alternately an empty
    generate (unload now) and a chat (unload once answered), while two clients chat with `a`:
    an unload nobody waits for, it takes out no model in use. `a` is stopped no time while they
    chat (counted in the swap log), every chat is served by its one process; once the chats end,
    `a` unloads, as the keep_alive asked."""
    stack: Stack = stack_factory(config({m: _model(m) for m in ("a", "b")}))
    chat(stack.url, "a")
    pid = stack.model("a")["pid"]
    hi = [{"role": "user", "content": "hi"}]
    with Chatting(stack) as chatting:
        statuses = []
        for i in range(LOADS):
            if i % 2 == 0:
                statuses.append(_ollama(stack, "/api/generate", {"model": "a", "keep_alive": 0}))
            else:
                body = {"model": "a", "messages": hi, "stream": False, "keep_alive": 0}
                statuses.append(_ollama(stack, "/api/chat", body))
            time.sleep(PACE)
        _, swaps = stack.get_json("/api/swaps")
        stops = [r for r in swaps["swaps"] if r["kind"] in ("stop", "sleep")]
        assert stops == [], stops
        assert stack.model("a")["pid"] == pid
    assert not chatting.failures, chatting.failures
    assert set(statuses) == {200}
    assert set(chatting.served) == {pid}, set(chatting.served)
    # Once nobody chats, the keep_alive 0 holds: a unloads.
    stack.wait_state("a", "stopped", timeout=30)


def test_ollamas_keep_alive_0_leaves_a_start_that_requests_wait_for(
    stack_factory, tmp_path: Path
) -> None:
    """An empty generate with `keep_alive: 0` for `a` while `a` starts for a chat that waits
    for it: answered at once, and the start goes on to serve the chat (it was aborted, and the
    chat answered 503, before)."""
    models = {"a": {"cmd": fake_model_cmd("a", "--health-delay", "2")}}
    stack: Stack = stack_factory(config(models))
    answered: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    def wait_for_a() -> None:
        try:
            answered.append(chat(stack.url, "a"))
        except BaseException as exc:  # reported below
            failures.append(exc)

    waiting = threading.Thread(target=wait_for_a)
    waiting.start()
    try:
        stack.wait_state("a", "starting")
        assert _ollama(stack, "/api/generate", {"model": "a", "keep_alive": 0}) == 200
    finally:
        waiting.join(30)
    assert not failures, failures
    assert len(answered) == 1
    _, swaps = stack.get_json("/api/swaps")
    assert [r for r in swaps["swaps"] if r["kind"] in ("stop", "sleep")] == []
