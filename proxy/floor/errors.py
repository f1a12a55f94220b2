"""Every error the proxy raises, in one tree, and the one error shape it answers with: OpenAI's
`{"error": {"message", "type", "param", "code"}}` (`param` null), under llama-swap's `"src"` marker
(its #1038), which tells an error swapd made from one an upstream sent:
`{"src": "swapd", "error": {...}}`.

Hierarchy (each an `ipc.errors.Failure`, as the daemon's are, so every one carries the HTTP status
and `code` its client is answered with; one argument order for all: the message, then keywords):

    Failure (ipc.errors)
    └── ProxyError                   any status (`status=`); a daemon's `Error` reply (`from_reply`)
        ├── BadRequest               400 bad_request        (a body, a query, credentials, a form)
        ├── Unauthorized             401 unauthorized       (the API key; `WWW-Authenticate`)
        ├── Forbidden                403 forbidden          (a cross-site state change)
        ├── NotFound                 404 not_found
        ├── TooManyRequests          429 concurrency_limit  (the model's share of its limit)
        ├── Unavailable              503 service_unavailable
        └── BadGateway               502 bad_gateway        an upstream failed the request
            ├── Refused              nothing listens on its port: no byte of the request was
            │                        sent, so it may be sent again (`pipeline._send_admitted`)
            ├── UpstreamError        the transport's: nothing usable came before the response
            │   │                    head (`forward.py` words it for the client, naming the
            │   │                    upstream, as `BadGateway` or `Refused`)
            │   ├── UpstreamRefused  the connection was refused
            │   ├── HeadTimeout      no head within `timeouts.responseHeader` (never retried)
            │   └── HeadTooLarge     a head over `conn.MAX_HEAD` bytes
            ├── UpstreamBroken       the upstream broke off the response body (the relay ends
            │                        the response as HTTP allows)
            └── OutOfStep            bytes that answer no request: the connection is dropped

Upstream error responses are passed through untouched; only errors swapd itself generates use
this shape (or, asked for with `Accept: text/plain` or `text/html`, llama-swap's text and page).
The status -> (type, default code) mapping happens here only, in `kind_of`.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import msgspec
from aiohttp import web

from ...ipc.errors import Failure
from ...ipc.messages import Error

__all__ = [
    "SRC",
    "BadGateway",
    "BadRequest",
    "Failure",
    "Forbidden",
    "HeadTimeout",
    "HeadTooLarge",
    "NotFound",
    "OutOfStep",
    "ProxyError",
    "Refused",
    "TooManyRequests",
    "Unauthorized",
    "Unavailable",
    "UpstreamBroken",
    "UpstreamError",
    "UpstreamRefused",
    "error_body",
    "error_response",
    "kind_of",
]

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
    accept: str = "",
) -> web.Response:
    """The error in the shape the client's `Accept` asks for, as llama-swap's `SendResponse`
    chooses it: `text/plain` named gets `swapd: <message>`, else `text/html` a small page, else
    the JSON above."""
    if "text/plain" in accept:
        text = f"{SRC}: {message}"
        return web.Response(status=status, text=text, content_type="text/plain", headers=headers)
    if "text/html" in accept:
        page = f"<html><body><h1>{SRC}</h1><p>{html.escape(message)}</p></body></html>"
        return web.Response(status=status, text=page, content_type="text/html", headers=headers)
    return web.Response(
        status=status,
        body=error_body(status, message, code, log_tail),
        content_type="application/json",
        headers=headers,
    )


class ProxyError(Failure):
    """Raised anywhere below a handler; `front.guard` answers it with `response()`.

    `status`: the class's own unless given; `code`: the class's own, else the status's default
    (`kind_of`); `headers`: set on the error response (`Retry-After`, `WWW-Authenticate`)."""

    default_status = 500
    default_code = ""  # the status's own (`kind_of`)

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        log_tail: Sequence[str] = (),
    ) -> None:
        status = self.default_status if status is None else status
        code = code or self.default_code or kind_of(status)[1]
        super().__init__(message, status=status, code=code, log_tail=log_tail)
        self.headers = headers

    @classmethod
    def from_reply(cls, reply: Error) -> ProxyError:
        """A daemon's `Error` reply, raised again on this side."""
        return cls(reply.message, status=reply.status, code=reply.code, log_tail=reply.log_tail)

    def response(self, accept: str = "") -> web.Response:
        """`accept`: the request's `Accept` (`error_response`)."""
        return error_response(
            self.status,
            self.message,
            self.code,
            headers=self.headers,
            log_tail=self.log_tail,
            accept=accept,
        )


class BadRequest(ProxyError):
    default_status = 400


class Unauthorized(ProxyError):
    default_status = 401


class Forbidden(ProxyError):
    default_status = 403


class NotFound(ProxyError):
    default_status = 404


class TooManyRequests(ProxyError):
    default_status = 429
    default_code = "concurrency_limit"


class Unavailable(ProxyError):
    default_status = 503


class BadGateway(ProxyError):
    """An upstream (a model's server, or a peer) failed the request."""

    default_status = 502


class Refused(BadGateway):
    """The 502 of an upstream whose port refused the connection: no byte of the request was
    sent, so it may be sent again where there is reason to think the model is back."""


class UpstreamError(BadGateway):
    """The upstream failed before sending a complete response head (the transport's words;
    `forward.unreachable` says which upstream)."""


class UpstreamRefused(UpstreamError):
    """Nothing listens on the upstream's port (the connection was refused): no byte of the
    request was sent."""


class HeadTimeout(UpstreamError):
    """No response head within `timeouts.responseHeader` of the request being sent (never
    retried on another connection: the upstream may be working on it)."""


class HeadTooLarge(UpstreamError):
    """A response head larger than the lean pool takes (`conn.MAX_HEAD`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"response head larger than {limit} bytes")


class UpstreamBroken(BadGateway):
    """The upstream broke off the response body."""


class OutOfStep(BadGateway):
    """Bytes from the upstream that answer no request: the connection cannot be trusted (raised
    in llhttp's callbacks; the exchange fails with it)."""
