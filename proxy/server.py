"""aiohttp's server, set up for a proxy that faces any client, and the shutdown grace.

* Its request handler is `dispatch.Dispatch`: model requests straight to the pipeline, every
  other request to the `web.Application`.

* Request bodies are not decompressed (`auto_decompress=False`): they go upstream as sent.
* Request lines and header fields are limited to 8190 bytes each, 128 header lines (aiohttp's
  defaults, nginx's order of size); a whole request head must arrive within `HEAD_TIMEOUT_S`
  of its first byte (`$SWAPD_PROXY_HEAD_TIMEOUT_S`, default 10 s), or the connection gets a 408
  and is closed; an idle kept-alive connection is closed after `KEEPALIVE_S`
  (`$SWAPD_PROXY_KEEPALIVE_S`, default 75 s, nginx's).
* A request the parser rejects is a client's mistake: it gets a 400 in the OpenAI error shape
  with a fixed message per kind of fault (never the offending bytes, which may hold a key), one
  DEBUG log line naming the kind, and a count in `stats.bad_requests`; never an ERROR
  traceback. An exception in swapd's own code is still a 500 with its traceback logged.
* Shutdown (SIGTERM), contract C2: stop accepting; new requests on kept-alive connections get
  503 and `Connection: close` (`app.front`); requests under way run for up to the grace; then
  every response still streaming is ended as an upstream that broke off would end it (chunked:
  the terminating chunk; fixed length: the connection closed), and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from typing import Any

from aiohttp import http_exceptions, web
from aiohttp.web_protocol import RequestHandler

from .context import ProxyContext
from .dispatch import Dispatch
from .errors import error_response
from .observe.access_log import LOGGER as ACCESS_LOGGER
from .observe.access_log import access_logger
from .observe.stats import Stats

log = logging.getLogger(__name__)

KEEPALIVE_S = float(os.environ.get("SWAPD_PROXY_KEEPALIVE_S", "75"))
HEAD_TIMEOUT_S = float(os.environ.get("SWAPD_PROXY_HEAD_TIMEOUT_S", "10"))
MAX_LINE = 8190
GC_YOUNG_THRESHOLD = 20_000
# After the grace, how long ended streams get to write their last bytes before the rest is cut.
_FINAL_FLUSH_S = 2.0

HANDLER_ARGS: dict[str, Any] = {
    "keepalive_timeout": KEEPALIVE_S,
    "access_log": ACCESS_LOGGER,
    "max_line_size": MAX_LINE,
    "max_field_size": MAX_LINE,
    "max_headers": 128,
    "auto_decompress": False,
    "lingering_time": 2.0,
}

_FAULTS: tuple[tuple[type[BaseException], str], ...] = (
    (http_exceptions.LineTooLong, f"request line or header field longer than {MAX_LINE} bytes"),
    (http_exceptions.BadHttpMethod, "malformed request method"),
    (http_exceptions.BadStatusLine, "malformed request line"),
    (http_exceptions.InvalidURLError, "malformed request target"),
    (http_exceptions.InvalidHeader, "malformed header field"),
    (http_exceptions.TransferEncodingError, "malformed chunked body"),
    (http_exceptions.ContentLengthError, "malformed or conflicting Content-Length"),
    (http_exceptions.BadHttpMessage, "malformed request"),
)


def fault_of(exc: BaseException | None) -> str:
    for kind, text in _FAULTS:
        if isinstance(exc, kind):
            return text
    return "malformed request"


class SwapdRequestHandler(RequestHandler):
    """aiohttp's connection handler, with the bounded head time and quiet bad requests."""

    __slots__ = ("_head_timer", "_stats")

    def __init__(self, manager: web.Server, stats: Stats, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._stats = stats
        self._head_timer: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        waiter = self._waiter
        if waiter is not None and not waiter.done() and not self._messages:
            # Bytes of a request head that is not complete yet: its clock starts now.
            if self._head_timer is None:
                self._head_timer = self._loop.call_later(HEAD_TIMEOUT_S, self._head_too_slow)
        elif self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _head_too_slow(self) -> None:
        self._head_timer = None
        waiter = self._waiter
        if waiter is None or waiter.done() or self._messages or self.transport is None:
            return
        self._stats.bad_requests += 1
        log.debug("request head not complete after %.0f s; closing the connection", HEAD_TIMEOUT_S)
        body = error_response(408, "request head not received in time").body
        assert isinstance(body, bytes)
        self.transport.write(
            b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        self.force_close()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            return super().handle_error(request, status, exc, message)
        self._stats.bad_requests += 1
        fault = fault_of(exc)
        # The exception's own text may quote the offending bytes (a header with a key in it).
        log.debug("bad request from %s: %s (%s)", request.remote, fault, type(exc).__name__)
        if request.writer.output_size > 0:
            raise ConnectionError("response already under way")
        response = error_response(status, fault)
        response.force_close()
        return response


async def serve(
    app: web.Application, ctx_of: Any, create_server: Any, stop: asyncio.Event, grace: float
) -> None:
    """Run `app` on the server `create_server(factory)` makes until `stop`, then shut down."""
    runner = web.AppRunner(
        app, handle_signals=False, handler_cancellation=True, shutdown_timeout=1.0, **HANDLER_ARGS
    )
    await runner.setup()
    # Everything built so far lives as long as the process: out of the collector's way, so its
    # full collections walk only what requests allocate (a few per cent of CPU per request).
    gc.collect()
    gc.freeze()
    # A request allocates a hundred-odd tracked objects and 32 requests in flight keep a few
    # thousand alive: at the default threshold (700) nearly all of them survive a young
    # collection and are walked again by the older ones. Only cyclic garbage waits for the
    # collector (the rest is freed by reference counting), so a larger young generation costs
    # little memory.
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    manager = runner.server
    assert manager is not None
    # Model requests go straight to the pipeline, the rest to the Application (dispatch.py).
    manager.request_handler = Dispatch(app, manager.request_handler)
    ctx: ProxyContext = ctx_of(app)
    args = {
        **HANDLER_ARGS,
        "access_log_class": access_logger(ctx.stats, ctx.recorder, ctx.lines),
    }
    loop = asyncio.get_running_loop()
    server = await create_server(
        lambda: SwapdRequestHandler(manager, ctx.stats, loop=loop, **args)  # type: ignore[arg-type]
    )
    try:
        await stop.wait()
    finally:
        server.close()
        await _drain(ctx, grace)
        await runner.cleanup()


async def _drain(ctx: ProxyContext, grace: float) -> None:
    ctx.closing = True
    log.info("shutting down: %d request(s) under way, grace %.1f s", ctx.active, grace)
    if ctx.active == 0:
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ctx.idle.wait(), grace)
    if ctx.active > 0:
        log.info("grace over: ending %d response(s) still under way", ctx.active)
        ctx.streams.end()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ctx.idle.wait(), _FINAL_FLUSH_S)
