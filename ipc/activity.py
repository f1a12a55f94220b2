"""The activity log's record, as the daemon keeps and serves it (`ActivityRecord`), and a finished
request as a proxy reports it (`Finished`, with its `RawCapture`).

Field names and units follow llama-swap's `ActivityLogEntry` (`id`, `timestamp`, `model`,
`req_path`, `resp_content_type`, `resp_status_code`, `tokens{...}`, `duration_ms`,
`has_capture`, `error_msg`), so tools written for its activity API read swapd's; swapd adds
`model_asked`, `route`, `method`, `bytes`, `wait_ms`, `ttfb_ms` and `proxy_id`. A token figure of
-1 means "not reported", as in llama-swap.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import msgspec


# gc=False: records are made by the thousand and hold only scalars (no cycles possible), so the
# cyclic collector need not track them.
class Tokens(msgspec.Struct, kw_only=True, gc=False):
    cache_tokens: int = -1
    draft_tokens: int = -1
    draft_acc_tokens: int = -1
    input_tokens: int = -1
    output_tokens: int = -1
    prompt_per_second: float = -1.0
    tokens_per_second: float = -1.0


class ActivityRecord(msgspec.Struct, kw_only=True, gc=False):
    """One model request, written once by the proxy that served it, when its response ended.
    `id` is 0 until the daemon stores it (ids grow by one across every proxy)."""

    id: int = 0
    timestamp: float  # wall-clock time the request arrived (seconds since the epoch)
    model: str  # the model that served it (a peer's as `peer/model`), or as asked when refused
    model_asked: str = ""  # the name the client sent (an alias, a peer FQN), "" when none
    route: str  # "model", "upstream", "comfyui" or "peer"
    method: str
    req_path: str  # without the query
    resp_content_type: str = ""
    resp_status_code: int
    bytes: int = 0  # response body bytes sent to the client
    duration_ms: float  # arrival to the last byte sent
    wait_ms: float = 0.0  # waiting for the daemon: a start, a swap, a drain
    ttfb_ms: float = -1.0  # arrival to the upstream's response head (-1: none came)
    tokens: Tokens = msgspec.field(default_factory=Tokens)
    has_capture: bool = False
    error_msg: str = ""
    proxy_id: str = ""


class InFlight(msgspec.Struct, kw_only=True, gc=False):
    """A model request under way, as llama-swap's in-flight entry has it: reported by its proxy
    in the first batch after it began, again as its response head and bytes come (at most every
    `FLIGHT_UPDATE_S`), removed with its record. Headers are one value per name
    (proxy/observe/flights.py), the secret ones redacted by the daemon as it takes the entry
    (daemon/observe/captures.py's rules)."""

    id: str  # "<proxy_id>-<n>"
    timestamp: float
    model: str
    req_path: str
    method: str
    remote_ip: str = ""
    proxy_id: str = ""
    req_headers: dict[str, str] = msgspec.field(default_factory=dict)
    resp_headers: dict[str, str] = msgspec.field(default_factory=dict)
    resp_bytes: int = 0  # response body bytes sent to the client so far


# llama-swap's `inflightUpdateInterval`: how often a streaming request's bytes are news.
FLIGHT_UPDATE_S = 0.25


def rfc3339(timestamp: float) -> str:
    """A wall-clock time as llama-swap's JSON writes Go's `time.Time` (UTC, `Z`)."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def flight_json(flight: InFlight, now: float | None = None) -> dict[str, Any]:
    """llama-swap's in-flight entry (`/api/events` `inflight`, `GET /api/inflight`): its
    RFC 3339 `timestamp` and `elapsed_ms` as of `now` (wall clock; default: this moment)."""
    out = msgspec.to_builtins(flight)
    out["timestamp"] = rfc3339(flight.timestamp)
    elapsed = (time.time() if now is None else now) - flight.timestamp
    out["elapsed_ms"] = max(0, int(elapsed * 1000))
    return out


class RawCapture(msgspec.Struct, array_like=True, gc=False):
    """A capture as a proxy sends it (`captureBuffer`): the request's header pairs as aiohttp
    read them (`raw_headers`, bytes, secrets and all) and the response's as sent, with the
    bodies captured (None: not captured, by path or for a failed response). The daemon redacts
    the secret headers, keeps one value per name and counts the size (daemon/observe/captures.py),
    so a proxy's share of a capture is a few references."""

    req_headers: tuple[tuple[bytes, bytes], ...]
    req_body: bytes | None
    resp_headers: tuple[tuple[str, str], ...]
    resp_body: bytes | None


class Finished(msgspec.Struct, array_like=True, gc=False):
    """A finished model request as its proxy reports it (`ActivityReport.records`): the figures
    the pipeline had at hand, positional on the wire (array-like: cheaper to build, encode and
    decode than a map per record). The daemon turns it into the `ActivityRecord` it keeps: the
    wall-clock `timestamp` (`started` plus the report's `clock`), milliseconds, the token counts
    parsed from `body` or `tail` and, for a status >= 400, `error_msg` from `body` and `reason`
    (daemon/observe/intake.py)."""

    started: float  # the proxy's loop clock when the request arrived
    model: str
    model_asked: str
    route: str
    method: str
    req_path: str
    resp_content_type: str
    resp_status_code: int
    size: int  # response body bytes sent to the client
    duration: float  # seconds, arrival to the last byte sent
    waited: float  # seconds waiting for the daemon
    ttfb: float  # seconds to the upstream's response head, -1 when none came
    reason: str  # the response's reason phrase, for a status >= 400
    body: bytes | None  # a small whole body that carries counts or an error
    tail: bytes | None  # a stream's last bytes from the first line with counts
    capture: RawCapture | None = None
    # In llama-swap's activity log (a POST to a model route, `/upstream/` included when the
    # path below the model is one): stored and shown. The others count in `/metrics` only.
    listed: bool = True
