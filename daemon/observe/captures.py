"""The captures of every proxy's requests (`captureBuffer`), kept by the daemon under their
record's id: at most `captureBuffer` bytes in all (bodies and headers), the oldest evicted
first, one larger than the whole buffer never kept (llama-swap's `cache.Cache`, which counts
compressed bytes: swapd keeps them as they are).

The proxies send each capture's header pairs as they are (`RawCapture`); redaction happens
here, when the capture is stored: one value per name (the first, as llama-swap's `headerMap`),
and `[REDACTED]` for a credential, known by its header's name (`secret_name`: llama-swap's
`redactHeaders` and more; the session headers `ui.activity.session_id` names are shown, as
llama-swap's UI shows them) or by its value (`Secrets`: a value that holds a configured key, in
whatever header a client put it, the session headers included). The secrets cross only the
private `ipc://` socket to the daemon, which holds the config's `apiKeys` anyway, and are never
kept nor shown (docs/endpoints.md, "Captures")."""

from __future__ import annotations

import base64
import binascii
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ...ipc.activity import RawCapture

_encode = msgspec.json.Encoder().encode

REDACTED = "[REDACTED]"
# The credential headers clients and servers send (lower case): llama-swap's five, Azure
# OpenAI's and API Management's keys, Gemini's, Azure Functions', GitLab's, AWS's session token.
SECRET_HEADERS = frozenset(
    {
        "authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key",
        "api-key", "x-goog-api-key", "ocp-apim-subscription-key", "x-functions-key",
        "private-token", "x-amz-security-token",
    }
)  # fmt: skip
# ... and every header with one of these words in its name (`x-custom-auth`, `x-my-api-key`,
# `X-ApiKey`, `x-access-token`, `x-client-secret`): better a header that is no credential
# loses its value in the capture than one that is shows it. Whole words, so that the
# `x-ratelimit-remaining-tokens` an upstream answers with stay readable.
SECRET_WORDS = frozenset(
    {
        "auth", "authorization", "key", "apikey", "token", "secret", "password", "passwd",
        "cookie", "credential", "credentials", "session", "signature",
    }
)  # fmt: skip
_WORDS = re.compile(r"[-_.]")


def secret_name(name: str) -> bool:
    lower = name.lower()
    return lower in SECRET_HEADERS or any(w in SECRET_WORDS for w in _WORDS.split(lower))


class Secrets:
    """The configured keys (`apiKeys` and the peers' `apiKey`s) a header value must not show:
    one that holds a key as it is (`Bearer sk-...`, `token=sk-...`) or as the password of
    `Basic` credentials is redacted whatever the header's name. `shown`: the header names
    (`ui.activity.session_id`) whose name alone redacts nothing: llama-swap's UI shows their
    values as the request's session, and `X-Session-ID` has a credential word in its name."""

    def __init__(self, keys: Iterable[str] = (), shown: Iterable[str] = ()) -> None:
        self.keys = tuple(k for k in keys if k)
        self.shown = frozenset(name.lower() for name in shown)

    def secret(self, name: str, value: str) -> bool:
        """Whether the header `name: value` is shown as `[REDACTED]`."""
        by_name = secret_name(name) and name.lower() not in self.shown
        return by_name or self.held_in(value)

    def held_in(self, value: str) -> bool:
        keys = self.keys
        if not keys:
            return False
        if any(key in value for key in keys):
            return True
        scheme, _, credentials = value.strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        password = decoded.partition(b":")[2].decode("utf-8", "replace")
        return any(key in password for key in keys)


NO_SECRETS = Secrets()


class Capture(msgspec.Struct, kw_only=True, gc=False):
    """A request's and its response's headers and bodies as kept, in llama-swap's
    `ReqRespCapture` shape (`GET /api/captures/{id}`; bodies are base64 in its JSON), under its
    record's `id`; `size` is what it counts against `captureBuffer` (bodies and headers).

    gc=False: a full buffer holds thousands, of strs, bytes and dicts of strs only (no cycle
    possible), which the cyclic collector would otherwise walk at every full collection."""

    id: int = 0
    req_path: str = ""
    req_headers: dict[str, str] | None = None
    req_body: bytes | None = None
    resp_headers: dict[str, str] | None = None
    resp_body: bytes | None = None
    size: int = 0


def headers_of(
    pairs: Iterable[tuple[str, str]], secrets: Secrets = NO_SECRETS
) -> tuple[dict[str, str], int]:
    """One value per name, secrets redacted; and the bytes the kept pairs count."""
    out: dict[str, str] = {}
    size = 0
    for key, value in pairs:
        if key not in out:
            if secrets.secret(key, value):
                value = REDACTED
            out[key] = value
            size += len(key) + len(value)
    return out, size


def raw_headers_of(
    pairs: Iterable[tuple[bytes, bytes]], secrets: Secrets = NO_SECRETS
) -> tuple[dict[str, str], int]:
    """`headers_of` for the request's header bytes. aiohttp reads them as UTF-8; the JSON a
    capture is shown in cannot carry aiohttp's surrogate escapes for bytes that are not, so
    those read U+FFFD here."""
    return headers_of(
        ((k.decode("utf-8", "replace"), v.decode("utf-8", "replace")) for k, v in pairs), secrets
    )


def capture_of(
    raw: RawCapture, record_id: int, path: str, secrets: Secrets = NO_SECRETS
) -> Capture:
    req_headers, req_size = raw_headers_of(raw.req_headers, secrets)
    resp_headers, resp_size = headers_of(raw.resp_headers, secrets)
    req_body, resp_body = raw.req_body, raw.resp_body
    return Capture(
        id=record_id,
        req_path=path,
        req_headers=req_headers,
        req_body=req_body,
        resp_headers=resp_headers,
        resp_body=resp_body,
        size=req_size + resp_size + len(req_body or b"") + len(resp_body or b""),
    )


class CaptureCache:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        # In arrival order, the first the oldest (an OrderedDict: taking the first of a plain
        # dict whose front keeps being deleted walks over every deleted slot).
        self.items: OrderedDict[int, Capture] = OrderedDict()
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
            self.size -= items.popitem(last=False)[1].size
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
