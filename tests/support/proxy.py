"""Helpers shared by the proxy's process tests (tests/test_proxy_*.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import urllib.request
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httptools

from tests.support.stack import (
    FAKE_MODEL,
    PYTHON,
    Stack,
    fake_model_cmd,
    free_ports,
    http_get,
    wait_for,
)


def local_model(name: str, port: int, *extra: str, **keys: Any) -> dict[str, Any]:
    """A config entry running tests/support/upstreams/fake_model.py (stands for llama-server) on
    `port`.

    Explicit ports (not ${PORT} from startPort) so parallel test runs never collide."""
    return {
        "cmd": fake_model_cmd(name, *extra, port=str(port)),
        "proxy": f"http://127.0.0.1:{port}",
        **keys,
    }


def model_ports(count: int) -> list[int]:
    return free_ports(count)


@contextmanager
def standalone_upstream(name: str, port: int) -> Iterator[str]:
    """A fake_model process outside swapd, standing in for a remote peer (another llama-swap)."""
    proc = subprocess.Popen(
        [PYTHON, str(FAKE_MODEL), "--port", str(port), "--name", name],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_get(url + "/health", 1.0)[0] == 200, 15, what=f"peer {name} up")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def received(stack: Stack) -> dict[str, int]:
    """How many messages of each type the daemon has received (StatusReply.received)."""
    return dict(stack.status().get("received", {}))


def in_flight(stack: Stack, model: str) -> int:
    """`model`'s requests in flight, as the proxy's `/running` reports them."""
    with urllib.request.urlopen(stack.url + "/running", timeout=5) as resp:
        running = {m["model"]: m for m in json.load(resp)["running"]}
    return int(running.get(model, {}).get("in_flight", 0))


def model_log_has(stack: Stack, model_id: str, text: str, timeout: float = 10.0) -> str:
    return wait_for(
        lambda: text in stack.model_log(model_id) and stack.model_log(model_id),
        timeout,
        what=f"{text!r} in {model_id}'s log",
    )


# ------------------------------------------------------------------------------------------------
# A raw HTTP/1.1 connection: for what an HTTP client library hides (pipelining, byte-by-byte
# sends, framing, the server closing a kept-alive connection).


@dataclass
class RawResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    chunked: bool

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


class _ResponseReader:
    """httptools callbacks collecting responses (1xx interim answers skipped)."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.done: deque[RawResponse] = deque()
        self.pieces: deque[bytes] = deque()  # body pieces of the response being read, as they come
        self._headers: list[tuple[str, str]] = []
        self._body: list[bytes] = []

    def on_message_begin(self) -> None:
        self._headers = []
        self._body = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_body(self, body: bytes) -> None:
        self._body.append(body)
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        if status >= 200:
            framing = " ".join(v for k, v in self._headers if k.lower() == "transfer-encoding")
            body = b"".join(self._body)
            self.done.append(RawResponse(status, self._headers, body, "chunked" in framing))


class RawConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.responses = _ResponseReader()
        self.eof = False

    @classmethod
    async def open(cls, url: str) -> RawConnection:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def _read_more(self) -> None:
        data = await self.reader.read(65536)
        if not data:
            self.eof = True
            raise ConnectionError("the server closed the connection")
        self.responses.parser.feed_data(data)

    async def response(self, timeout: float = 10.0) -> RawResponse:
        async with asyncio.timeout(timeout):
            while not self.responses.done:
                await self._read_more()
        return self.responses.done.popleft()

    async def body_piece(self, timeout: float = 10.0) -> bytes:
        """The next piece of a response body as it arrives (for streams)."""
        async with asyncio.timeout(timeout):
            while not self.responses.pieces:
                await self._read_more()
        return self.responses.pieces.popleft()

    async def closed_by_server(self, timeout: float) -> bool:
        """Wait up to `timeout` for the server to close the connection."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    await self._read_more()
        except ConnectionError:
            return True
        except TimeoutError:
            return False

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


def post_json(path: str, body: object, *extra_headers: str, version: str = "1.1") -> bytes:
    """The bytes of a POST with a JSON body of known length."""
    data = json.dumps(body).encode()
    lines = [
        f"POST {path} HTTP/{version}",
        "Host: swapd",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
        *extra_headers,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data
