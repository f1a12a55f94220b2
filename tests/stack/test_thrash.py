"""No one client thrashes the GPU for everyone (docs/swapping.md), through the real stack: while two
clients chat with `a`, a third asks for `b` and `c` alternately every 100 ms, for longer than
collation could hold a swap back (maxWait, 5 s), with `POST /api/models/load/<m>?wait=false`. Its
loads cause no swap while `a` is in use: `a` is started once, every chat is served by that one
process, and `b`, `c` wait, saying why (`unwatched`); once the chats end, the load goes. And a
chat whose client went away while it waited counts as waiting no more."""

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


def _post(stack: Stack, path: str) -> int:
    request = urllib.request.Request(stack.url + path, data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status


def test_loads_nobody_waits_for_cause_no_swap_while_others_chat(
    stack_factory, tmp_path: Path
) -> None:
    stack: Stack = stack_factory(config({m: _model(m) for m in ("a", "b", "c")}))
    chat(stack.url, "a")
    pid = stack.model("a")["pid"]
    stop = threading.Event()
    served: list[int] = []
    failures: list[BaseException] = []

    def victim() -> None:
        while not stop.is_set():
            try:
                served.append(int(chat(stack.url, "a")["served_by"]["pid"]))
            except BaseException as exc:  # reported below, with the counts
                failures.append(exc)
                return

    victims = [threading.Thread(target=victim) for _ in range(2)]
    for t in victims:
        t.start()
    try:
        wait_for(lambda: len(served) >= 10, what="the chats under way")
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
    finally:
        stop.set()
        for t in victims:
            t.join(30)
    assert not failures, failures
    assert set(statuses) == {202}
    # Every chat was served by the one process of a: none waited for a swap.
    assert set(served) == {pid}, set(served)
    _, swaps = stack.get_json("/api/swaps")
    started = [(r["kind"], r["model"]) for r in swaps["swaps"] if r["kind"] in ("start", "swap")]
    assert started == [("start", "a")], started
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
