"""The client connection as aiohttp's request handler sees it while the hot path lends it one
request (hot_path.py).

It passes everything through to the real transport and watches what aiohttp writes with an
httptools response parser (callbacks only for the head and the end, so llhttp does the work) to
learn when the response to the lent request is complete. Then, once the hot path has also seen the
end of the request, the loan ends: the wrapper is detached (later calls do nothing, so aiohttp's
teardown cannot touch the connection) and the connection is back on the hot path.

A response that switches protocols (a websocket's 101) or ends the connection (`Connection: close`,
HTTP/1.0 without keep-alive), or output the parser cannot follow, turns the loan into a gift: the
connection stays with aiohttp until it closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from httptools import HttpParserError, HttpParserUpgrade, HttpResponseParser


class LentTransport(asyncio.Transport):
    def __init__(
        self, transport: asyncio.Transport, *, head_request: bool, on_change: Callable[[], None]
    ) -> None:
        super().__init__()
        self._transport = transport
        self._head_request = head_request
        self._on_change = on_change  # called when `response_done` or `for_good` turns true
        self._watch = HttpResponseParser(self)
        self._watching = True
        self._interim = False
        self._keep_alive = True
        self.response_done = False
        self.for_good = False
        self.detached = False
        self.reading_paused = False

    # --- what aiohttp calls ---------------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.detached:
            self._transport.write(data)
            self._see(data)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        if not self.detached:
            pieces = list(list_of_data)
            self._transport.writelines(pieces)  # one send, as aiohttp meant (chunk framing)
            for data in pieces:
                self._see(data)

    def _see(self, data: bytes | bytearray | memoryview) -> None:
        if self._watching:
            try:
                self._watch.feed_data(bytes(data))
            except (HttpParserError, HttpParserUpgrade):
                self._give()

    def is_closing(self) -> bool:
        return self.detached or self._transport.is_closing()

    def close(self) -> None:
        if not self.detached:
            self._transport.close()

    def abort(self) -> None:
        if not self.detached:
            self._transport.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        if not self.detached:
            self.reading_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if not self.detached:
            self.reading_paused = False
            self._transport.resume_reading()

    def is_reading(self) -> bool:
        return not self.detached and self._transport.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if not self.detached:
            self._transport.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def write_eof(self) -> None:
        if not self.detached:
            self._transport.write_eof()

    # --- httptools callbacks on aiohttp's output ------------------------------------------------
    def on_headers_complete(self) -> None:
        if not self._watching:
            return
        status = self._watch.get_status_code()
        self._keep_alive = self._watch.should_keep_alive()
        if status == 101:
            self._give()
        elif status < 200:
            self._interim = True  # 100 Continue: the real head follows
        elif self._head_request or status in (204, 304):
            # No body follows whatever the head says (and llhttp would wait for one).
            self._done()

    def on_message_complete(self) -> None:
        if not self._watching:
            return
        if self._interim:
            self._interim = False
        else:
            self._done()

    # --- outcome ----------------------------------------------------------------------------------
    def _done(self) -> None:
        if not self._keep_alive:
            self._give()  # aiohttp closes the connection after this response
            return
        self.response_done = True
        self._watching = False
        self._on_change()

    def _give(self) -> None:
        self.for_good = True
        self._watching = False
        self._on_change()
