"""The daemon's observability service: it takes the proxies' `ActivityReport`s, numbers and keeps
the records, tells every proxy their ids (`ActivityAdded`, for `/api/events`), feeds them to the
Prometheus figures, and answers the activity API and `/metrics` for whichever proxy asks."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec

from ...ipc.activity import ActivityRecord, Finished, InFlight, flight_json
from ...ipc.event_frames import frame
from ...ipc.messages import (
    ActivityAdded,
    ActivityReport,
    CancelInFlight,
    CancelRequested,
    Document,
    Error,
    Event,
    InFlightChanged,
    QueryActivity,
    QueryCapture,
    QueryMetrics,
    QueryStats,
    Reply,
)
from ...ipc.model_status import GpuInfo, ModelStatus
from ...ipc.routing_table import RoutePeer
from ..config import Config
from . import activity_query
from .activity_db import ActivityDB
from .activity_store import ActivityStore
from .captures import CaptureCache, CaptureFigures, Secrets, capture_of, headers_of
from .intake import record_of
from .metrics import CONTENT_TYPE, Metrics
from .request_figures import model_labels

log = logging.getLogger("swapd.daemon")

_encode = msgspec.json.Encoder().encode


def record_json(record: ActivityRecord, has_capture: bool = False) -> dict[str, Any]:
    """A record as the activity API shows it: llama-swap's RFC 3339 `timestamp`, and whether
    its capture is still kept (evicted ones are not)."""
    out = msgspec.to_builtins(record)
    out["has_capture"] = has_capture
    out["timestamp"] = (
        datetime.fromtimestamp(record.timestamp, UTC).isoformat().replace("+00:00", "Z")
    )
    if not record.error_msg:
        del out["error_msg"]
    return out


def secrets_of(config: Config) -> Secrets:
    """The keys no capture shows: the clients' (`apiKeys`) and the peers' (`apiKey`); and the
    session headers llama-swap's UI shows (`ui.activity.session_id`)."""
    peers: Iterable[RoutePeer] = config.peers.values()
    keys = [*config.api_keys, *(p.api_key for p in peers if p.api_key)]
    return Secrets(keys, shown=config.session_headers)


class Publisher(Protocol):
    """The daemon's endpoint, as far as this service uses it."""

    def publish_nowait(self, make: Callable[[int], Event]) -> None: ...

    async def reply(self, identity: bytes, reply: Reply) -> None: ...


class Observer:
    def __init__(
        self,
        config: Config,
        instance: str,
        endpoint: Publisher,
        models: Callable[[], Iterable[ModelStatus]],
        read_gpus: Callable[[], Awaitable[Iterable[GpuInfo]]],
        *,
        metrics: Metrics | None = None,
        before_scrape: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = ActivityStore(config.metrics_max_in_memory)
        self.db: ActivityDB | None = None
        if config.store_path:
            try:
                self.db = ActivityDB(config.store_path)
            except sqlite3.Error as exc:
                # The daemon runs all the same (the log in memory only): not being able to
                # keep history must not take the models down.
                log.error(
                    "activity store %s unusable, kept in memory only: %s", config.store_path, exc
                )
            else:
                self.store.next_id = self.db.next_id
                self.store.records.extend(self.db.recent(config.metrics_max_in_memory))
        self.captures = CaptureCache(config.capture_buffer * 1024 * 1024)
        self.secrets = secrets_of(config)
        self.instance = instance
        self.endpoint = endpoint
        # The daemon's registry (its effects count into it too); its own without one.
        self.metrics = metrics if metrics is not None else Metrics()
        self.metrics.request_figures.labels = model_labels(config)
        self.metrics.registry.register(CaptureFigures(self.captures))
        self.metrics.gauges.models = models
        self.on_records: Callable[[list[ActivityRecord]], None] | None = self.metrics.records
        # Told the records the activity log took in (the traffic learning's input).
        self.on_stored: Callable[[list[ActivityRecord]], None] | None = None
        self.read_gpus = read_gpus
        self.in_flight: dict[str, InFlight] = {}
        # `/api/events` clients by proxy, as their Hellos say: new records are announced and
        # in-flight frames rendered only while some proxy has one.
        self.watchers: dict[str, int] = {}
        # Awaited before each scrape (the performance sampler starts when someone reads).
        self.before_scrape = before_scrape

    def watching(self, proxy_id: str, count: int) -> None:
        if count > 0:
            self.watchers[proxy_id] = count
        else:
            self.watchers.pop(proxy_id, None)

    def register(self, on: Callable[..., None]) -> None:
        """Its messages in the endpoint's dispatch table."""
        reply = self.endpoint.reply
        on(ActivityReport, lambda _, m: self.report(m))
        on(QueryActivity, self._activity, spawn=True)
        on(QueryStats, self._stats, spawn=True)
        on(QueryCapture, lambda i, m: reply(i, self.capture(m)))
        on(QueryMetrics, self._metrics, spawn=True)
        on(CancelInFlight, lambda _, m: self._cancel(m.id))

    def _cancel(self, flight: str) -> None:
        self.endpoint.publish_nowait(
            lambda seq: CancelRequested(instance=self.instance, seq=seq, id=flight)
        )

    async def _metrics(self, identity: bytes, message: QueryMetrics) -> None:
        if self.before_scrape is not None:
            await self.before_scrape()
        try:
            devices = list(await self.read_gpus())
        except Exception as exc:
            log.debug("GPU inventory for /metrics failed: %s", exc)
            devices = []
        self.metrics.gauges.gpus = lambda: devices
        body = await self.metrics.exposition()
        await self.endpoint.reply(
            identity, Document(id=message.id, body=body, content_type=CONTENT_TYPE)
        )

    def _publish(self, records: list[ActivityRecord]) -> None:
        if not self.watchers or not records:
            return  # ActivityAdded is for subscribers only: no proxy has one
        first, count = records[0].id, len(records)  # the store numbers a batch in a row
        self.endpoint.publish_nowait(
            lambda seq: ActivityAdded(instance=self.instance, seq=seq, first=first, count=count)
        )

    def forget(self, proxy_id: str) -> None:
        """A proxy gone silent: its requests are no longer in flight."""
        self.watchers.pop(proxy_id, None)
        gone = tuple(k for k, v in self.in_flight.items() if v.proxy_id == proxy_id)
        for key in gone:
            del self.in_flight[key]
        if gone:
            self._publish_flights((), gone)

    def _publish_flights(self, upserts: tuple[InFlight, ...], removes: tuple[str, ...]) -> None:
        # Published whoever watches (every proxy keeps the table, for a new client's snapshot and
        # `/api/inflight`); framed only while some proxy has a client.
        frames, count = b"", 0
        if self.watchers:
            frames = b"".join(
                [
                    frame("inflight", {"operation": "upsert", "request": flight_json(f)})
                    for f in upserts
                ]
                + [frame("inflight", {"operation": "remove", "id": key}) for key in removes]
            )
            count = len(upserts) + len(removes)
        self.endpoint.publish_nowait(
            lambda seq: InFlightChanged(
                instance=self.instance,
                seq=seq,
                upserts=upserts,
                removes=removes,
                frames=frames,
                count=count,
            )
        )

    def report(self, message: ActivityReport) -> None:
        if message.started or message.ended:
            secrets = self.secrets
            for flight in message.started:
                # Redacted here, as captures are, before any proxy or client sees the entry.
                flight.req_headers = headers_of(flight.req_headers.items(), secrets)[0]
                flight.resp_headers = headers_of(flight.resp_headers.items(), secrets)[0]
                self.in_flight[flight.id] = flight
            for key in message.ended:
                self.in_flight.pop(key, None)
            self._publish_flights(message.started, message.ended)
        if not message.records:
            return
        pairs = _read(message)
        records = [record for _, record in pairs]
        # The activity log holds what llama-swap's holds (`Finished.listed`); /metrics counts all.
        listed = [(item, record) for item, record in pairs if item.listed]
        stored = self.store.add([record for _, record in listed])
        for item, record in listed:
            if item.capture is not None:
                capture = capture_of(item.capture, record.id, record.req_path, self.secrets)
                record.has_capture = self.captures.add(capture)
        if self.db is not None and stored:
            self.db.write(stored)
        if self.on_records is not None:
            try:
                self.on_records(records)
            except Exception:
                log.exception("counting activity records failed")
        if self.on_stored is not None and stored:
            try:
                self.on_stored(stored)
            except Exception:
                log.exception("learning from activity records failed")
        self._publish(stored)

    async def _activity(self, identity: bytes, message: QueryActivity) -> None:
        await self.endpoint.reply(identity, await self.activity(message))

    async def _stats(self, identity: bytes, message: QueryStats) -> None:
        await self.endpoint.reply(identity, await self.stats(message))

    async def activity(self, message: QueryActivity) -> Reply:
        """From the file when there is one (all history), else from memory."""
        try:
            if self.db is not None:
                page = await self.db.page(activity_query.parse_query(message.query))
            else:
                page = activity_query.list_activity(self.store.records, message.query)
        except activity_query.QueryError as exc:
            return Error(id=message.id, status=400, code="bad_request", message=str(exc))
        captures = self.captures
        page["data"] = [record_json(r, r.id in captures) for r in page["data"]]
        return Document(id=message.id, body=_encode(page))

    async def stats(self, message: QueryStats) -> Reply:
        if self.db is not None:
            figures = await self.db.stats(message.model)
        else:
            figures = activity_query.stats(self.store.records, message.model)
        return Document(id=message.id, body=_encode(figures))

    def capture(self, message: QueryCapture) -> Reply:
        body = self.captures.document(message.capture)
        if body is None:
            return Error(id=message.id, status=404, code="not_found", message="capture not found")
        return Document(id=message.id, body=body)

    def reconfigure(self, config: Config) -> None:
        """A reload: the in-memory sizes follow; `store.path` is read at start only."""
        self.store.resize(config.metrics_max_in_memory)
        # Series of a model the reload removed stay (the config's history bounds them); its
        # requests from now on count as `OTHER`.
        self.metrics.request_figures.labels = model_labels(config)
        self.captures.resize(config.capture_buffer * 1024 * 1024)
        self.secrets = secrets_of(config)
        if config.store_path != (self.db.path if self.db is not None else ""):
            log.warning("store.path changed: it takes effect when swapd is restarted")

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None


def _read(message: ActivityReport) -> list[tuple[Finished, ActivityRecord]]:
    """Each finished request of `message` with the record it becomes. A record that cannot be
    read (a bug the tests did not find) is left out, logged: one request never costs its batch
    the others'."""
    clock, proxy_id = message.clock, message.proxy_id
    out = []
    for item in message.records:
        try:
            out.append((item, record_of(item, clock, proxy_id)))
        except Exception:
            log.exception("an activity record of %s could not be read: left out", proxy_id)
    return out
