"""The activity log's record, as proxies report it and the daemon keeps and serves it.

Field names and units follow llama-swap's `ActivityLogEntry` (`id`, `timestamp`, `model`,
`req_path`, `resp_content_type`, `resp_status_code`, `tokens{...}`, `duration_ms`,
`has_capture`, `error_msg`), so tools written for its activity API read swapd's; swapd adds
`model_asked`, `route`, `method`, `bytes`, `wait_ms`, `ttfb_ms` and `proxy_id`. A token figure of
-1 means "not reported", as in llama-swap.
"""

from __future__ import annotations

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
    """A model request under way (llama-swap's in-flight entry, less the headers): reported by
    its proxy in the first batch after it began, removed with its record."""

    id: str  # "<proxy_id>-<n>"
    timestamp: float
    model: str
    req_path: str
    method: str
    remote_ip: str = ""
    proxy_id: str = ""


class Capture(msgspec.Struct, kw_only=True):
    """A request's and its response's headers and bodies (`captureBuffer`), in llama-swap's
    `ReqRespCapture` shape (`GET /api/captures/{id}`; bodies are base64 in its JSON). Sent with
    its record's batch: `record` is the record's index in that `ActivityReport`, `id` the
    record's id once the daemon numbered it. Secret headers read `[REDACTED]`; a body swapd did
    not capture (by path, or of a failed response) is None."""

    id: int = 0
    record: int = -1
    req_path: str = ""
    req_headers: dict[str, str] | None = None
    req_body: bytes | None = None
    resp_headers: dict[str, str] | None = None
    resp_body: bytes | None = None

    @property
    def size(self) -> int:
        """The bytes it holds (bodies and headers), which `captureBuffer` bounds."""
        heads = (self.req_headers or {}, self.resp_headers or {})
        return (
            len(self.req_body or b"")
            + len(self.resp_body or b"")
            + sum(len(k) + len(v) for h in heads for k, v in h.items())
        )
