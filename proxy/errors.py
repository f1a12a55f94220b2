"""The one error shape the proxy answers with: OpenAI's `{"error": {"message", "type", "param",
"code"}}` (`param` null), under llama-swap's `"src"` marker (its #1038), which tells an error swapd
made from one an upstream sent: `{"src": "swapd", "error": {...}}`.

Upstream error responses are passed through untouched; only errors swapd itself generates use this.
`ProxyError` is an `ipc.errors.Failure` (the daemon's `EnsureError` is another), and the status ->
(type, default code) mapping happens here only, in `kind_of`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec
from aiohttp import web

from ..ipc.errors import Failure
from ..ipc.messages import Error

# Status -> (type, default code), as llama-swap's envelope does (reference §6).
_KINDS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "bad_request"),
    401: ("authentication_error", "unauthorized"),
    403: ("authentication_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    409: ("invalid_request_error", "conflict"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    502: ("server_error", "bad_gateway"),
    503: ("server_error", "service_unavailable"),
    504: ("server_error", "gateway_timeout"),
}

_encode = msgspec.json.Encoder().encode
# Where the error was made: llama-swap writes its own name; a client tells proxy errors from the
# upstream's by the key.
SRC = "swapd"


def kind_of(status: int) -> tuple[str, str]:
    """OpenAI's error `type` and the default `code` for an HTTP status."""
    found = _KINDS.get(status)
    if found is not None:
        return found
    if 400 <= status < 500:
        return "invalid_request_error", "invalid_request"
    return "server_error", "internal_error"


def error_body(
    status: int, message: str, code: str | None = None, log_tail: Sequence[str] = ()
) -> bytes:
    kind, default_code = kind_of(status)
    error: dict[str, object] = {
        "message": message,
        "type": kind,
        "param": None,
        "code": code or default_code,
    }
    if log_tail:
        error["log_tail"] = list(log_tail)
    return _encode({"src": SRC, "error": error})


def error_response(
    status: int,
    message: str,
    code: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    log_tail: Sequence[str] = (),
) -> web.Response:
    return web.Response(
        status=status,
        body=error_body(status, message, code, log_tail),
        content_type="application/json",
        headers=headers,
    )


class ProxyError(Failure):
    """Raised anywhere below a handler; `app.py`'s middleware turns it into `error_response`."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        log_tail: Sequence[str] = (),
    ) -> None:
        super().__init__(message, status=status, code=code or kind_of(status)[1], log_tail=log_tail)
        self.headers = headers

    @classmethod
    def from_reply(cls, reply: Error) -> ProxyError:
        """A daemon's `Error` reply, raised again on this side."""
        return cls(reply.status, reply.message, reply.code, log_tail=reply.log_tail)

    def response(self) -> web.Response:
        return error_response(
            self.status, self.message, self.code, headers=self.headers, log_tail=self.log_tail
        )
