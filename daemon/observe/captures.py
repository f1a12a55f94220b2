"""The captures of every proxy's requests (`captureBuffer`), kept by the daemon under their
record's id: at most `captureBuffer` bytes in all (bodies and headers), the oldest evicted
first, one larger than the whole buffer never kept (llama-swap's `cache.Cache`, which counts
compressed bytes: swapd keeps them as they are)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ...ipc.activity import Capture

_encode = msgspec.json.Encoder().encode


class CaptureCache:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.items: dict[int, Capture] = {}  # in arrival order: the first is the oldest
        self.size = 0
        self.evicted = 0

    def resize(self, limit: int) -> None:
        self.limit = limit
        self._evict(0)

    def add(self, capture: Capture) -> bool:
        size = capture.size
        if self.limit <= 0 or size > self.limit:
            return False
        old = self.items.pop(capture.id, None)
        if old is not None:
            self.size -= old.size
        self._evict(size)
        self.items[capture.id] = capture
        self.size += size
        return True

    def _evict(self, room: int) -> None:
        items = self.items
        while items and self.size + room > self.limit:
            oldest = next(iter(items))
            self.size -= items.pop(oldest).size
            self.evicted += 1

    def __contains__(self, record_id: int) -> bool:
        return record_id in self.items

    def document(self, record_id: int) -> bytes | None:
        """llama-swap's `ReqRespCapture` JSON (bodies base64), or None when it is not kept."""
        capture = self.items.get(record_id)
        if capture is None:
            return None
        out: dict[str, Any] = {
            "id": capture.id,
            "req_path": capture.req_path,
            "req_headers": capture.req_headers,
            "req_body": capture.req_body,
            "resp_headers": capture.resp_headers,
            "resp_body": capture.resp_body,
        }
        return _encode(out)


class CaptureFigures(Collector):
    """`/metrics`: what the capture cache holds and has evicted."""

    def __init__(self, cache: CaptureCache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[Metric]:
        cache = self.cache
        yield GaugeMetricFamily(
            "swapd_captures_bytes", "bytes the captures kept hold (captureBuffer)", cache.size
        )
        yield GaugeMetricFamily("swapd_captures", "captures kept", len(cache.items))
        yield CounterMetricFamily(
            "swapd_captures_evicted", "captures evicted to make room", cache.evicted
        )
