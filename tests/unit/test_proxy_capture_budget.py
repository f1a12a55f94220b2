"""A response's capture tee gives its share of the process's budget (`captureBuffer`) back when
its stream ends, however it ends: here its client goes away mid-stream, the handler is
cancelled, and the response never reaches the accounting stage. The share comes back at once,
not when the collector happens to free the tail (the proxy runs with `gc.freeze()`): the test
keeps the tail alive to show it.

Real parts on loopback: an aiohttp upstream that streams, swapd's lean pool and relay
(`forward`), an aiohttp server in front with handler cancellation on (as `server.py` runs it),
and a raw client socket."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestServer

from swapd.proxy.floor.account import Account, TeeBudget
from swapd.proxy.upstream.address import UpstreamAddress
from swapd.proxy.upstream.forward import forward, outgoing
from swapd.proxy.upstream.pool import UpstreamPool
from swapd.proxy.upstream.relay import Streams
from swapd.proxy.upstream.transport import LeanTransport


async def test_a_response_whose_client_went_away_gives_its_budget_back() -> None:
    tee = TeeBudget(10_000)
    streams = Streams(tee)
    pool = UpstreamPool()
    upstream_done = asyncio.Event()  # never set while the test needs the stream open
    handler_ended = asyncio.Event()
    accounts: list[Account] = []

    async def upstream_stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: first\n\n")
        await upstream_done.wait()
        return response

    upstream_app = web.Application()
    upstream_app.router.add_get("/stream", upstream_stream)
    upstream = TestServer(upstream_app, host="127.0.0.1")
    await upstream.start_server()
    address = UpstreamAddress.parse(f"http://127.0.0.1:{upstream.port}")

    async def proxy_handler(request: web.Request) -> web.StreamResponse:
        acc = Account(keep=1000)  # capturing: its tee counts against `tee`
        acc.started = asyncio.get_running_loop().time()
        accounts.append(acc)
        try:
            out = outgoing(request, address, "/stream", host=None)
            return await forward(request, acc, LeanTransport(pool), out, "m", streams)
        finally:
            handler_ended.set()

    proxy_app = web.Application()
    proxy_app.router.add_get("/v1/stream", proxy_handler)
    proxy = TestServer(proxy_app, host="127.0.0.1", handler_cancellation=True)
    await proxy.start_server()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"GET /v1/stream HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        while b"data: first" not in received:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            assert chunk, "the proxy closed before the first chunk"
            received += chunk
        assert tee.held == len(b"data: first\n\n")  # the tee holds its share while streaming
        assert len(streams.replies) == 1
        writer.close()  # the client goes away mid-stream
        await asyncio.wait_for(handler_ended.wait(), 10)
        (acc,) = accounts
        assert acc.tail is not None  # alive: no collection can have given the share back
        assert tee.held == 0
        assert not streams.replies
    finally:
        upstream_done.set()
        await proxy.close()
        await upstream.close()
        pool.close()
