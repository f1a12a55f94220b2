"""A raw-socket HTTP/1.1 server on loopback for tests of the proxy's upstream clients: each
connection runs a handler that reads requests (`read_request`) and writes exactly the bytes it
is given, and the server counts the connections it accepted (what keep-alive reuse is observed
by). `tests/unit/test_upstream_conformance.py` runs both transports against it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

# What a connection's handler gets: the connection's number (0 for the first accepted), and
# its reader and writer. It answers as many requests as it likes, then returns (the server then
# closes the connection) or leaves it open by awaiting the reader's end.
Handler = Callable[[int, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Received:
    head: bytes
    body: bytes


@dataclass
class RawUpstream:
    url: str
    accepted: int = 0
    requests: list[Received] = field(default_factory=list)


async def read_request(reader: asyncio.StreamReader) -> Received:
    """One request off the connection, its body de-framed (a Content-Length, or chunked)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").lower().split("\r\n")
    length = next((int(x.split(":", 1)[1]) for x in lines if x.startswith("content-length:")), 0)
    if any(x.startswith("transfer-encoding:") and "chunked" in x for x in lines):
        body = b""
        while (size := int((await reader.readline()).split(b";")[0], 16)) > 0:
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readuntil(b"\r\n")  # the last chunk's blank line (no trailers sent here)
        return Received(head, body)
    return Received(head, await reader.readexactly(length))


@contextlib.asynccontextmanager
async def raw_upstream(handler: Handler) -> AsyncIterator[RawUpstream]:
    """A loopback server whose every connection runs `handler`; closed at the end."""
    server_state = RawUpstream("")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = server_state.accepted
        server_state.accepted += 1
        try:
            await handler(number, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away: some cases expect it
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)  # bound at once: no race
    server_state.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield server_state
    finally:
        server.close()
        await server.wait_closed()


def answering(*answers: bytes, then_close: bool = False) -> Callable[[RawUpstream], Handler]:
    """A handler answering the connection's requests in turn with `answers` (each recorded in
    `upstream.requests`); then it closes, or waits for the client to close."""

    def make(upstream: RawUpstream) -> Handler:
        async def handle(_: int, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            for answer in answers:
                upstream.requests.append(await read_request(reader))
                w.write(answer)
                await w.drain()
            if not then_close:
                await reader.read()  # until the client closes

        return handle

    return make


@contextlib.asynccontextmanager
async def serving(make: Callable[[RawUpstream], Handler]) -> AsyncIterator[RawUpstream]:
    """`raw_upstream` with a handler that may record into the upstream it serves."""
    holder: list[Handler] = []

    async def handle(n: int, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await holder[0](n, r, w)

    async with raw_upstream(handle) as upstream:
        holder.append(make(upstream))
        yield upstream
