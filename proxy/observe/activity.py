"""The activity log's proxy side: one `ActivityRecord` per model request (model routes,
`/upstream/`, `/comfyui/`, peers), built in the accounting stage once the response is done, and
reported to the daemon in batches (one `ActivityReport` cast at most every `FLUSH_S`). The daemon
numbers and keeps the records and answers the activity API, so every proxy process gives the same
answers (docs/architecture.md, "Observability with N proxies").

Per request this costs one array-like struct (`Finished`: the figures the pipeline has at hand)
and an append; the daemon, which handles every record anyway, turns it into the record it keeps,
parses the token counts from the small body or the stream's tail sent with it, and redacts and
sizes the capture (daemon/observe/intake.py, captures.py). One `Recorder` per proxy, in its
context (`ctx.recorder`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable

from aiohttp import web

from ...ipc.activity import FLIGHT_UPDATE_S, Finished, InFlight, RawCapture
from ...ipc.messages import ActivityReport
from ..floor.account import NO_MODEL, Account, Tail, TeeBudget
from ..mirror.state import ProxyState
from .captures import capture_of
from .flights import flight_of, sent_bytes

FLUSH_S = 0.1
MAX_PENDING = 10_000
# A body up to this size travels to the daemon as it is (cheaper than looking for counts in it);
# a larger one only when it has some.
SMALL = 4096


class _Reported:
    """An in-flight request the daemon heard of, and what it was last told of its response."""

    __slots__ = ("acc", "head", "request", "sent", "told_at")

    def __init__(self, request: web.BaseRequest, acc: Account, told_at: float) -> None:
        self.request = request
        self.acc = acc
        self.sent = sent_bytes(acc)
        self.head = acc.resp_headers is not None
        self.told_at = told_at


class Recorder:
    """`send`: how a report reaches the daemon (None: the proxy is closing); `state`: the mirror,
    for the table's `captureBuffer`; `tee`: the budget the relay's tees count against, whose
    limit is that `captureBuffer`."""

    def __init__(
        self,
        proxy_id: str,
        send: Callable[[ActivityReport], None] | None,
        state: ProxyState,
        tee: TeeBudget,
    ) -> None:
        self.send = send
        self.proxy_id = proxy_id
        self.state = state
        self.tee = tee
        # Off: no activity records, so no request figures in /metrics and no activity or
        # in-flight events (the benchmark's baseline; operators who want none of it).
        self.enabled = os.environ.get("SWAPD_PROXY_ACTIVITY", "1") != "0"
        # A proxy whose daemon is away keeps the newest MAX_PENDING; older ones are dropped.
        self._pending: deque[Finished] = deque(maxlen=MAX_PENDING)
        self._timer: asyncio.TimerHandle | None = None
        # In flight, by number: begun and not yet reported, and reported as started (their end
        # is news, and so are their response's head and bytes). The id (`<proxy_id>-<n>`) is
        # only written for those reported; `cancel` cancels the request's handler task. A
        # request outside llama-swap's in-flight view (`Account.listed` False) is never
        # reported; one whose route is not decided yet waits for the next batch.
        self._new: dict[int, tuple[web.BaseRequest, Account]] = {}
        self._reported: dict[int, _Reported] = {}
        self._ended: list[str] = []
        self._count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._capture_bytes = 0  # the bodies of the captures waiting: one `captureBuffer` at most

    def begin(self, request: web.BaseRequest, acc: Account) -> None:
        """A model request entered the pipeline (acc.started is set)."""
        if not self.enabled or self.send is None:
            return
        self._count = acc.flight = count = self._count + 1
        self.tee.limit = acc.keep = self.state.routes.table.capture_bytes
        self._new[count] = (request, acc)
        if self._timer is None:
            self._arm()

    @staticmethod
    def decide(acc: Account, listed: bool, method: str) -> None:
        """The route decision says whether llama-swap would show the request (its in-flight
        table; its activity log for a POST). One it would not log keeps no capture."""
        acc.listed = listed
        if not listed or method != "POST":
            acc.keep = 0

    def _arm(self, delay: float = FLUSH_S) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        self._timer = loop.call_later(delay, self.flush)

    def cancel(self, flight: str) -> bool:
        """End request `flight` of this process (`POST /api/inflight/{id}/cancel`): its handler is
        cancelled, which closes its upstream exchange; False when it is not one of ours."""
        mine, _, number = flight.rpartition("-")
        if mine != self.proxy_id or not number.isdigit():
            return False
        entry = self._new.get(int(number))
        reported = self._reported.get(int(number))
        request = entry[0] if entry is not None else reported.request if reported else None
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
        status = response.status
        body = acc.body
        tail = acc.tail
        if body is not None:
            size = len(body)  # the relay's small body, the response's own
        elif tail is not None:
            size = tail.total
        elif isinstance(response, web.Response):
            raw = response.body
            size = len(raw) if isinstance(raw, bytes) else 0
            if status >= 400 and isinstance(raw, bytes):
                body = raw  # for its error message
        else:
            size = 0
        content_type = acc.content_type or response.content_type
        path = path_of(request)
        capture = None
        # One that named no model is not (llama-swap refuses it before its metrics middleware).
        listed = bool(acc.listed) and request.method == "POST" and acc.model != NO_MODEL
        if acc.keep and listed:
            capture = capture_of(request, response, acc, path)
            if capture is not None:
                self._capture_bytes += _bodies(capture)
                if self._capture_bytes > acc.keep:
                    self._evict_captures(acc.keep)
            if tail is not None:
                tail.release()
        if body is not None and status < 400 and len(body) > SMALL and not _counts_in(body):
            body = None  # a large body with nothing to count in it need not travel
        counted = None
        if tail is not None and status < 400:
            counted = counted_part(tail, content_type)
        if acc.counts is not None and status < 400:
            # A dialect rewrote the body: the counts are the upstream's, which it kept.
            body, counted = acc.counts, None
        self._pending.append(
            Finished(
                acc.started,
                acc.model,
                acc.asked,
                acc.route,
                request.method,
                path,
                content_type,
                status,
                size,
                duration,
                acc.waited,
                acc.ttfb,
                response.reason if status >= 400 else "",
                body,
                counted,
                capture,
                listed,
            )
        )
        if self._timer is None:
            self._arm()

    def _evict_captures(self, keep: int) -> None:
        """The captures waiting outgrew one `captureBuffer` (the daemon keeps no more, and may
        be away): the oldest go first, their records stay."""
        for item in self._pending:
            if self._capture_bytes <= keep:
                return
            capture = item.capture
            if capture is not None:
                self._capture_bytes -= _bodies(capture)
                item.capture = None

    def flush(self) -> None:
        report = self.take()
        if report is not None and self.send is not None:
            self.send(report)
        if self._timer is None and (self._new or self._reported):
            # Requests under way: their responses' bytes are news, at llama-swap's pace.
            self._arm(FLIGHT_UPDATE_S)

    def take(self) -> ActivityReport | None:
        """The records waiting, with their token counts, and the in-flight news (requests begun,
        responses under way that sent more, requests ended) as one report (None: none)."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        pending, self._pending = self._pending, deque(maxlen=MAX_PENDING)
        self._capture_bytes = 0
        now = self._loop.time() if self._loop is not None else 0.0
        wall = time.time() - now
        started = self._flights(now, wall)
        ended, self._ended = tuple(self._ended), []
        if not pending and not started and not ended:
            return None
        return ActivityReport(
            proxy_id=self.proxy_id,
            records=tuple(pending),
            started=started,
            ended=ended,
            clock=wall,
        )

    def _flights(self, now: float, wall: float) -> tuple[InFlight, ...]:
        """Entries for the requests begun since the last report, and again for those reported
        whose response brought its head or more bytes (each at most every `FLIGHT_UPDATE_S`)."""
        if not self._new and not self._reported:
            return ()
        proxy_id = self.proxy_id
        out: list[InFlight] = []

        def entry(flight: int, request: web.BaseRequest, acc: Account) -> InFlight:
            path = path_of(request)
            return flight_of(flight, request, acc, proxy_id=proxy_id, wall=wall, path=path)

        for flight, rep in self._reported.items():
            acc = rep.acc
            if now - rep.told_at < FLIGHT_UPDATE_S:
                continue
            sent, head = sent_bytes(acc), acc.resp_headers is not None
            if sent != rep.sent or head != rep.head:
                rep.sent, rep.head, rep.told_at = sent, head, now
                out.append(entry(flight, rep.request, acc))
        for flight, (request, acc) in list(self._new.items()):
            if acc.listed is None:
                continue  # the route is not decided yet
            del self._new[flight]
            if acc.listed:
                out.append(entry(flight, request, acc))
                self._reported[flight] = _Reported(request, acc, now)
        return tuple(out)


def path_of(request: web.BaseRequest) -> str:
    """The request's path without its query, as sent: the request target cut rather than the
    URL aiohttp builds (`rel_url`, a yarl object made on first use)."""
    target = request.raw_path
    if not target.startswith("/"):
        return request.rel_url.raw_path  # an absolute-form target: yarl takes it apart
    if "?" in target or "#" in target:
        return target.partition("?")[0].partition("#")[0]
    return target


def _bodies(capture: RawCapture) -> int:
    """What a waiting capture counts against `captureBuffer` here (its headers the daemon
    counts when it keeps it)."""
    return len(capture.req_body or b"") + len(capture.resp_body or b"")


def _counts_in(body: bytes) -> bool:
    return b'"usage"' in body or b'"timings"' in body


def counted_part(tail: Tail, content_type: str) -> bytes | None:
    """What of a streamed body's tail the daemon parses the counts from: an SSE stream's from
    the first line that mentions them (the lines before it count nothing), a JSON body's whole
    (it fit in the tail when it is short), nothing otherwise."""
    stream = "event-stream" in content_type
    if not stream and "json" not in content_type:
        return None
    data = tail.data()
    usage, timings = data.find(b'"usage"'), data.find(b'"timings"')
    first = usage if timings < 0 or 0 <= usage < timings else timings
    if first < 0:
        return None
    return data[data.rfind(b"\n", 0, first) + 1 :] if stream else data
