"""Shared pieces of the hostile-input tests (`tests/test_proxy_hostile*.py`): raw exchanges with
the proxy, the recording upstream's log, the proxy's log stream and its memory."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tests.support.proxy import RawConnection, RawResponse, local_model, model_ports, post_json
from tests.support.stack import Stack

CHAT = "/v1/chat/completions"

# What a server error or a crash leaves in the output of `swapd run` (circusd passes the proxy's
# and the daemon's stderr through) or in the proxy's `/logs` ring.
MODEL_LINE = re.compile(r"\[[^\]\s]+\] ")
SERVER_ERROR = re.compile(r"Traceback \(most recent call last\)|\bERROR\b|\bCRITICAL\b")


@dataclass
class Exchange:
    """Everything the proxy answered on one raw connection, and whether it then closed it."""

    responses: list[RawResponse]
    closed: bool

    @property
    def statuses(self) -> list[int]:
        return [r.status for r in self.responses]


async def exchange(
    stack: Stack,
    data: bytes,
    *,
    wait: float = 5.0,
    expect: int = 1,
    linger: float = 0.5,
    sent: asyncio.Event | None = None,
) -> Exchange:
    """Send `data` on a new connection; collect answers until `expect` came and then the proxy
    either closed the connection or sent nothing more for `linger` seconds (answers nobody
    asked for show up there), or until `wait` seconds passed without the expected answers.
    `sent` is set once `data` is handed to the connection (for a test that orders clients)."""
    conn = await RawConnection.open(stack.url)
    responses: list[RawResponse] = []
    try:
        await conn.send(data)
        if sent is not None:
            sent.set()
        while True:
            if len(responses) >= expect and linger <= 0:
                return Exchange(responses, False)
            try:
                responses.append(await conn.response(wait if len(responses) < expect else linger))
            except ConnectionError:
                return Exchange(responses, True)
            except TimeoutError:
                return Exchange(responses, False)
            except Exception:  # bytes that are no HTTP response at all count as an answer
                return Exchange([*responses, RawResponse(0, [], b"", False)], conn.eof)
    finally:
        await conn.close()


def is_openai_error(response: RawResponse, status: int | None = None) -> bool:
    try:
        error = json.loads(response.body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    shaped = isinstance(error.get("message"), str) and isinstance(error.get("type"), str)
    return shaped and (status is None or response.status == status)


class RequestLog:
    """What a fake_model started with `--request-log` received (one JSON line per request)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def mark(self) -> int:
        return len(self.entries())

    def since(self, mark: int) -> list[dict[str, Any]]:
        return self.entries()[mark:]

    def paths_since(self, mark: int) -> list[str]:
        return [e["raw_path"] for e in self.since(mark)]


def body_of(entry: dict[str, Any]) -> bytes:
    return base64.b64decode(entry["body_b64"])


def header_of(entry: dict[str, Any], name: str) -> list[str]:
    return [v for k, v in entry["headers"] if k.lower() == name.lower()]


class ProxyLogs:
    """The proxy's (and daemon's) log output, from a mark on: the output of `swapd run` and the
    proxy's own `/logs` ring, the two places an operator or a key holder reads it."""

    def __init__(self, stack: Stack, headers: dict[str, str] | None = None) -> None:
        self.stack = stack
        self.headers = headers or {}
        self.output_mark = len(stack.output())
        self.ring_mark = self.ring()

    def everything(self) -> str:
        """`GET /logs`: the proxy's ring, then every model's output with `[<model>] ` before
        each line."""
        request = urllib.request.Request(self.stack.url + "/logs", headers=self.headers)
        with urllib.request.urlopen(request, timeout=10) as resp:
            return str(resp.read().decode("utf-8", "replace"))

    def ring(self) -> str:
        """The proxy's own lines of `/logs`."""
        lines = self.everything().splitlines(keepends=True)
        return "".join(line for line in lines if not MODEL_LINE.match(line))

    def new_output(self) -> str:
        return self.stack.output()[self.output_mark :]

    def new_ring(self) -> str:
        ring = self.ring()
        # The ring holds its last 100 KiB: what was there before is cut from the front.
        return ring[len(self.ring_mark) :] if ring.startswith(self.ring_mark) else ring

    def server_errors(self) -> list[str]:
        lines = (self.new_output() + "\n" + self.new_ring()).splitlines()
        return [line for line in lines if SERVER_ERROR.search(line)]


def proxy_process(stack: Stack) -> psutil.Process:
    (pid,) = stack.watcher_pids("swapd-proxy")
    return psutil.Process(pid)


def reset_peak_rss(proc: psutil.Process) -> None:
    """Start the kernel's high-water mark of resident memory (VmHWM) again from now."""
    Path(f"/proc/{proc.pid}/clear_refs").write_text("5")


def peak_rss(proc: psutil.Process) -> int:
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data) if data else b"0\r\n\r\n"


@dataclass
class Hostile:
    """A running stack whose one model `rec` records what it receives."""

    stack: Stack
    rec: RequestLog
    logs: ProxyLogs


@contextlib.contextmanager
def recording_stack(log: Path) -> Iterator[Hostile]:
    """swapd with `rec`, tests/support/upstreams/fake_model.py (standing for llama-server) started
    with `--request-log LOG`, ready. On the way out: whatever the tests sent, the proxy wrote no
    error and no traceback."""
    (port,) = model_ports(1)
    config = {
        "healthCheckTimeout": 15,
        "models": {
            "rec": local_model("rec", port, "--request-log", str(log), concurrencyLimit=100)
        },
    }
    with Stack(config) as stack:
        logs = ProxyLogs(stack)
        setup = asyncio.run(exchange(stack, post_json(CHAT, {"model": "rec"}), wait=30))
        assert setup.statuses == [200], setup
        yield Hostile(stack, RequestLog(log), logs)
        assert logs.server_errors() == []


def request_head(start: str, *headers: str) -> bytes:
    """A request head with `Host: swapd` and `headers`, no body."""
    return ("\r\n".join([start, "Host: swapd", *headers]) + "\r\n\r\n").encode()


async def echo_paths(stack: Stack, count: int) -> list[tuple[str, str]]:
    """(path asked for, path `rec` answered for) for `count` requests in turn, each on a new
    connection: whoever uses the pooled upstream connection next."""
    found = []
    for i in range(count):
        path = f"/echo/after-{uuid.uuid4().hex[:8]}-{i}"
        got = await exchange(stack, request_head(f"GET /upstream/rec{path} HTTP/1.1"), linger=0)
        assert got.statuses == [200], got
        answer = json.loads(got.responses[0].body)
        found.append((path, answer.get("raw_path", got.responses[0].body.decode())))
    return found
