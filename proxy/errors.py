"""The one error shape the proxy answers with: OpenAI's `{"error": {"message", "type", "code"}}`.

Upstream error responses are passed through untouched; only errors swapd itself generates use this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec
from aiohttp import web

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


def error_body(
    status: int, message: str, code: str | None = None, log_tail: Sequence[str] = ()
) -> bytes:
    kind, default_code = _KINDS.get(
        status,
        ("invalid_request_error", "invalid_request")
        if 400 <= status < 500
        else ("server_error", "internal_error"),
    )
    error: dict[str, object] = {"message": message, "type": kind, "code": code or default_code}
    if log_tail:
        error["log_tail"] = list(log_tail)
    return _encode({"error": error})


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


class ProxyError(Exception):
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
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers
        self.log_tail = tuple(log_tail)

    def response(self) -> web.Response:
        return error_response(
            self.status, self.message, self.code, headers=self.headers, log_tail=self.log_tail
        )
