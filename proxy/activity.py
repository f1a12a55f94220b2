"""The activity log's proxy side: one `ActivityRecord` per model request (model routes,
`/upstream/`, `/comfyui/`, peers), built in the accounting stage once the response is done, and
reported to the daemon in batches (one `ActivityReport` cast at most every `FLUSH_S`). The daemon
numbers and keeps the records and answers the activity API, so every proxy process gives the same
answers (docs/architecture.md, "Observability with N proxies").

Per request this costs a struct and a list append; the token counts are parsed at flush time,
off the request's path, from the small body or the stream's tail the relay kept.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable

from aiohttp import web

from ..ipc.activity import ActivityRecord, Capture, InFlight, Tokens
from ..ipc.messages import ActivityReport
from . import tokens as token_parse
from .account import TEE, Account
from .captures import capture_of
from .state import ProxyState

FLUSH_S = 0.1
MAX_PENDING = 10_000


class _Pending:
    __slots__ = ("body", "capture", "record", "tail")

    def __init__(
        self,
        record: ActivityRecord,
        body: bytes | None,
        tail: bytes | None,
        capture: Capture | None,
    ) -> None:
        self.record = record
        self.body = body
        self.tail = tail
        self.capture = capture


class Recorder:
    def __init__(self) -> None:
        self.send: Callable[[ActivityReport], None] | None = None
        self.proxy_id = ""
        self.state: ProxyState | None = None  # for the table's `captureBuffer`
        # Off: no activity records, so no request figures in /metrics and no activity or
        # in-flight events (the benchmark's baseline; operators who want none of it).
        self.enabled = os.environ.get("SWAPD_PROXY_ACTIVITY", "1") != "0"
        # A proxy whose daemon is away keeps the newest MAX_PENDING; older ones are dropped.
        self._pending: deque[_Pending] = deque(maxlen=MAX_PENDING)
        self._timer: asyncio.TimerHandle | None = None
        # In flight, by number: begun and not yet reported, and reported as started (their end
        # is news). The id (`<proxy_id>-<n>`) is only written for those reported; `cancel`
        # cancels the request's handler task.
        self._new: dict[int, tuple[web.BaseRequest, Account]] = {}
        self._reported: dict[int, web.BaseRequest] = {}
        self._ended: list[str] = []
        self._count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._capture_bytes = 0  # of the captures waiting: at most one `captureBuffer`

    def begin(self, request: web.BaseRequest, acc: Account) -> None:
        """A model request entered the pipeline (acc.started is set)."""
        if not self.enabled or self.send is None:
            return
        self._count = acc.flight = count = self._count + 1
        if self.state is not None:
            TEE.limit = acc.keep = self.state.routes.table.capture_bytes
        self._new[count] = (request, acc)
        if self._timer is None:
            self._arm()

    def _arm(self) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        self._timer = loop.call_later(FLUSH_S, self.flush)

    def cancel(self, flight: str) -> bool:
        """End request `flight` of this process (`POST /api/inflight/{id}/cancel`): its handler is
        cancelled, which closes its upstream exchange; False when it is not one of ours."""
        mine, _, number = flight.rpartition("-")
        if mine != self.proxy_id or not number.isdigit():
            return False
        entry = self._new.get(int(number))
        request = entry[0] if entry is not None else self._reported.get(int(number))
        task = request.task if request is not None else None
        if task is None or task.done():
            return False
        task.cancel()
        return True

    def end(self, acc: Account) -> None:
        """The pipeline is done with the request (answered, failed or cancelled)."""
        flight = acc.flight
        if flight and self._new.pop(flight, None) is None and flight in self._reported:
            del self._reported[flight]
            self._ended.append(f"{self.proxy_id}-{flight}")
            if self._timer is None:
                self._arm()

    def note(self, request: web.BaseRequest, response: web.StreamResponse, acc: Account) -> None:
        if not self.enabled or self.send is None:
            return
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        duration = loop.time() - acc.started
        body = acc.body
        status = response.status
        tail = acc.tail
        if isinstance(response, web.Response):
            raw = response.body
            size = len(raw) if isinstance(raw, bytes) else 0
            if body is None and status >= 400 and isinstance(raw, bytes):
                body = raw
        else:
            size = tail.total if tail is not None else 0
        record = ActivityRecord(
            # The loop's clock until `take` turns it into the wall clock (one `time.time()` per
            # batch rather than per request).
            timestamp=acc.started,
            model=acc.model,
            model_asked=acc.asked or acc.model,
            route=acc.route,
            method=request.method,
            req_path=request.rel_url.raw_path,
            resp_content_type=acc.content_type or response.content_type or "",
            resp_status_code=status,
            bytes=size,
            duration_ms=duration * 1000,
            wait_ms=acc.waited * 1000,
            ttfb_ms=acc.ttfb * 1000 if acc.ttfb >= 0 else -1.0,
            error_msg=response.reason if status >= 400 else "",
            proxy_id=self.proxy_id,
        )
        capture = None
        if acc.keep:
            capture = capture_of(request, response, acc, record.req_path)
            if capture is not None:
                self._capture_bytes += capture.size
                if self._capture_bytes > acc.keep:
                    self._evict_captures(acc.keep)
            if tail is not None:
                tail.release()
        self._pending.append(
            _Pending(record, body, tail.data() if tail is not None else None, capture)
        )
        if self._timer is None:
            self._arm()

    def _evict_captures(self, keep: int) -> None:
        """The captures waiting outgrew one `captureBuffer` (the daemon keeps no more, and may
        be away): the oldest go first, their records stay."""
        for item in self._pending:
            if self._capture_bytes <= keep:
                return
            if item.capture is not None:
                self._capture_bytes -= item.capture.size
                item.capture = None

    def flush(self) -> None:
        report = self.take()
        if report is not None and self.send is not None:
            self.send(report)

    def take(self) -> ActivityReport | None:
        """The records waiting, with their token counts, as one report (None: none waiting)."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        pending, self._pending = self._pending, deque(maxlen=MAX_PENDING)
        self._capture_bytes = 0
        wall = time.time() - (self._loop.time() if self._loop is not None else 0.0)
        proxy_id = self.proxy_id
        started = tuple(
            InFlight(
                id=f"{proxy_id}-{flight}",
                timestamp=wall + acc.started,
                model=acc.model,
                req_path=request.rel_url.raw_path,
                method=request.method,
                remote_ip=request.remote or "",
                proxy_id=proxy_id,
            )
            for flight, (request, acc) in self._new.items()
        )
        self._reported.update((flight, entry[0]) for flight, entry in self._new.items())
        self._new.clear()
        ended, self._ended = tuple(self._ended), []
        if not pending and not started and not ended:
            return None
        records = []
        captures = []
        for item in pending:
            if item.capture is not None:
                item.capture.record = len(records)
                captures.append(item.capture)
            rec = item.record
            rec.timestamp += wall
            rec.tokens = _tokens_of(rec, item.body, item.tail)
            if rec.resp_status_code >= 400:
                rec.error_msg = token_parse.error_message(
                    rec.resp_status_code, rec.error_msg, item.body
                )
            records.append(rec)
        return ActivityReport(
            proxy_id=self.proxy_id,
            records=tuple(records),
            started=started,
            ended=ended,
            captures=tuple(captures),
        )


def _tokens_of(rec: ActivityRecord, body: bytes | None, tail: bytes | None) -> Tokens:
    if rec.resp_status_code >= 400:
        return Tokens()
    if tail is not None and "event-stream" in rec.resp_content_type:
        return token_parse.from_stream_tail(tail)
    if body is not None:
        return token_parse.from_body(body)
    if tail is not None and "json" in rec.resp_content_type:
        return token_parse.from_body(tail)  # a streamed JSON body that fit in the tail
    return Tokens()


RECORDER = Recorder()
