"""A client connection (proxy/connection.py) and the way in (proxy/dispatch.py), on aiohttp's
real server over loopback, as `server.serve` sets them up: a model request reaches the pipeline
handed the proxy's context (the request has no app: nothing of aiohttp's private state is
written to give it one); the head's clock runs on every head of a kept-alive connection, and not
on the rest of a body its handler did not read. The heads' deadline here is short
(`head_timeout`), so a test waits fractions of a second, never the default ten."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from swapd.proxy import pipeline
from swapd.proxy.connection import SwapdRequestHandler
from swapd.proxy.dispatch import Dispatch, Stages
from swapd.proxy.observe.stats import Stats
from swapd.proxy.server import HANDLER_ARGS

HEAD_TIMEOUT_S = 0.3
CHAT = "/v1/chat/completions"


@dataclass
class Front:
    port: int
    stats: Stats
    served: list[tuple[Any, web.BaseRequest]] = field(default_factory=list)
    guarded: list[bool] = field(default_factory=list)


@pytest.fixture
async def front() -> AsyncIterator[Front]:
    stats = Stats()
    served: list[tuple[Any, web.BaseRequest]] = []
    guarded: list[bool] = []

    async def serve_model(ctx: Any, request: web.BaseRequest) -> web.StreamResponse:
        served.append((ctx, request))
        return web.Response(text="model")

    async def guard(ctx: Any, request: Any, handler: Any, *, model_route: bool = False) -> Any:
        guarded.append(model_route)
        return await handler(request)

    # The stages Dispatch takes (the benchmark's hooks), and a context that holds them.
    stages = Stages(front=guard, model_route=serve_model)
    ctx = SimpleNamespace(stages=stages)

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def unread(request: web.Request) -> web.Response:
        return web.Response(text="answered before the body came")

    app = web.Application()
    app.router.add_post(CHAT, pipeline.handle_model_route)
    app.router.add_get("/ok", ok)
    app.router.add_post("/unread", unread)
    runner = web.AppRunner(app, handle_signals=False, handler_cancellation=True, **HANDLER_ARGS)
    await runner.setup()
    manager = runner.server
    assert manager is not None
    manager.request_handler = Dispatch(ctx, app, manager.request_handler, stages)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SwapdRequestHandler(
            manager, stats, loop=loop, head_timeout=HEAD_TIMEOUT_S, **HANDLER_ARGS
        ),
        "127.0.0.1",
        0,
    )
    port = server.sockets[0].getsockname()[1]
    try:
        yield Front(port, stats, served, guarded)
    finally:
        server.close()
        await runner.cleanup()


async def _answer(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    return head + await asyncio.wait_for(reader.readexactly(length), 10)


async def test_a_model_request_reaches_the_pipeline_with_the_context_and_no_app(
    front: Front,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    try:
        body = b'{"model": "m"}'
        writer.write(
            b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
            % (CHAT.encode(), len(body), body)
        )
        assert (await _answer(reader)).endswith(b"model")
        writer.write(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await _answer(reader)).endswith(b"ok")  # the Application's way
    finally:
        writer.close()
    ((ctx, request),) = front.served
    assert ctx.stages.model_route is not None  # the context Dispatch was made with
    assert front.guarded == [True]  # the front checks, told it is a model route
    with pytest.raises(AssertionError):
        request.app  # type: ignore[attr-defined]  # noqa: B018  no match info: none written


async def test_a_head_sent_slowly_on_a_kept_alive_connection_is_cut_off(front: Front) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    try:
        writer.write(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await _answer(reader)).endswith(b"ok")
        writer.write(b"GET /ok HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # never finished
        rest = await asyncio.wait_for(reader.read(), 10)  # until the proxy closes
    finally:
        writer.close()
    assert rest.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert front.stats.bad_requests == 1


async def test_the_rest_of_a_body_its_handler_did_not_read_starts_no_head_clock(
    front: Front,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    try:
        writer.write(b"POST /unread HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
        assert (await _answer(reader)).endswith(b"answered before the body came")
        writer.write(b"0123456789")  # the body, after its answer: aiohttp reads and drops it
        # A negative can only be shown by letting the time pass: past the heads' deadline, the
        # connection is still open and serves the next request, with no 408 before it.
        await asyncio.sleep(HEAD_TIMEOUT_S * 3)
        writer.write(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await _answer(reader)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")
    assert front.stats.bad_requests == 0
