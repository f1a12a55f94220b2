"""The activity log while circusd restarts one of two proxy processes mid-run, against the real
stack (tests/support/upstreams/fake_model.py stands for llama-server). Clients keep sending
chat requests, each on its own connection, each with its own tag (the generated tokens the model
reports, `x_tokens`, which the activity record keeps), so every answer a client got can be looked
up in the log.

* SIGTERM (how circusd stops or restarts a process): the process stops taking requests, lets
  those in flight finish within its shutdown grace and sends its last batch as it exits: every
  request a client got an answer for has its record, the slow ones in flight at the signal too.
* SIGKILL (a crash): what that process had not reported is lost: the requests in flight in it
  (their clients lose the connection) and those it finished within its last batch interval
  (`activity.FLUSH_S`, 100 ms) before the kill. Every answer older than that is in the log, and
  every answer a client read later than that after the kill (the survivor's, and the restarted
  process's).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.processes

CLIENTS = 4
CHAT = "/v1/chat/completions"
SLOW = 0  # the tag of the slow client's requests; the others count from 1
# The slack beyond FLUSH_S for the last batch to leave a killed process (a loaded 2-core box).
BATCH_SLACK_S = 1.0


class Load:
    """CLIENTS threads sending tagged requests until told to stop; when each answer arrived."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.stop = threading.Event()
        self.answered: dict[str, float] = {}  # tag -> monotonic time its answer was read
        self.slow_answered = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._count = 0
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(CLIENTS)]

    def _next(self) -> int:
        with self._lock:
            self._count += 1
            return self._count

    def _run(self, index: int) -> None:
        while not self.stop.is_set():
            slow = index == 0  # one client keeps a request in flight most of the time
            tag = SLOW if slow else self._next()
            body = {"model": "m", "messages": [], "x_tokens": tag, "x_delay": 0.5 if slow else 0}
            request = urllib.request.Request(
                self.stack.url + CHAT,
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            path = str(tag)
            try:
                with urllib.request.urlopen(request, timeout=30) as resp:
                    resp.read()
                    ok = resp.status == 200
            except (urllib.error.URLError, http.client.HTTPException, OSError):
                ok = False
            with self._lock:
                if not ok:
                    self.failed += 1
                elif slow:
                    self.slow_answered += 1
                else:
                    self.answered[path] = time.monotonic()

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def wait_answers(self, count: int) -> None:
        wait_for(lambda: len(self.answered) >= count, 30, what=f"{count} answers")


def _records(stack: Stack) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    page = 1
    while True:
        with urllib.request.urlopen(
            f"{stack.url}/api/metrics/activity?limit=999&page={page}&order=asc", timeout=10
        ) as resp:
            data = json.load(resp)
        rows += data["data"]
        if page >= data["total_pages"]:
            return rows
        page += 1


def _tag(record: dict[str, Any]) -> str:
    return str(record["tokens"]["output_tokens"])


def _serving(stack: Stack, pids: list[int]) -> int | None:
    ids = {str(r["proxy_id"]) for r in _records(stack)}
    return next((p for p in pids if any(f"-{p}-" in i for i in ids)), None)


@pytest.fixture
def stack(stack_factory: Callable[..., Stack]) -> Stack:
    (port,) = model_ports(1)
    return stack_factory(
        {
            "healthCheckTimeout": 15,
            "metricsMaxInMemory": 5000,
            "captureBuffer": 0,
            "models": {"m": local_model("m", port)},
        },
        proxy_processes=2,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_no_record_lost_beyond_those_in_flight(stack: Stack, sig: signal.Signals) -> None:
    urllib.request.urlopen(stack.url + "/upstream/m/", timeout=30).read()  # started
    before = stack.watcher_pids("swapd-proxy")
    assert len(before) == 2
    with Load(stack) as load:
        load.wait_answers(60)
        # The kernel hands each connection to whichever process accepts first: signal one that
        # has served some (its records name its pid), or the test would prove nothing.
        victim = wait_for(lambda: _serving(stack, before), 15, what="a proxy process with records")
        assert victim is not None
        os.kill(victim, sig)
        killed_at = time.monotonic()
        wait_for(
            lambda: len([p for p in stack.watcher_pids("swapd-proxy") if p not in before]) == 1,
            30,
            what="circusd to start the proxy process again",
        )
        at_restart = len(load.answered)
        load.wait_answers(at_restart + 60)
    answered, slow_answered = dict(load.answered), load.slow_answered

    # After a SIGKILL, a client may read an answer the killed process wrote just before it died
    # (its record went with the unsent batch): answers read within the slack after the kill are
    # in the lost window too.
    after = killed_at + (BATCH_SLACK_S if sig == signal.SIGKILL else 0.0)

    def settled() -> list[dict[str, Any]] | None:
        rows = _records(stack)
        seen = {_tag(r) for r in rows}
        if not all(p in seen for p in answered if answered[p] > after):
            return None
        slow = sum(1 for r in rows if _tag(r) == str(SLOW))
        return rows if sig == signal.SIGKILL or slow >= slow_answered else None

    rows = wait_for(settled, 15, what="the records of the answers after the restart")
    assert rows is not None
    recorded = {_tag(r) for r in rows if r["resp_status_code"] == 200}
    missing = {p for p in answered if p not in recorded}
    slow_recorded = len([r for r in rows if _tag(r) == str(SLOW)])
    # The process signalled had served some of them (its id names its pid).
    assert any(f"-{victim}-" in str(r["proxy_id"]) for r in rows)
    if sig == signal.SIGTERM:
        assert not missing, f"{len(missing)} answered requests have no record"
        assert slow_recorded >= slow_answered
    else:
        too_old = {p for p in missing if answered[p] < killed_at - BATCH_SLACK_S}
        assert not too_old, f"records lost beyond the last batch: {sorted(too_old)[:5]}"
        assert not {p for p in missing if answered[p] > after}
