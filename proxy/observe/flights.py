"""The in-flight entry of a request, as llama-swap's web UI reads it (`/api/events` `inflight`):
its request headers (the UI shows the user agent and the session headers of `ui.activity`), the
response's headers once they came, and the body bytes sent so far.

Headers are one value per name (the first, as llama-swap's `headerMap`), and a secret never
leaves the proxy: a credential header by name (llama-swap's list, and the other common ones) or
any value holding one of the configured API keys reads `[REDACTED]`.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from ...ipc.activity import InFlight
from ..account import Account

REDACTED = "[REDACTED]"
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
    }
)


def header_map(pairs: Iterable[tuple[str, str]], keys: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in pairs:
        if name in out:
            continue
        if name.lower() in SECRET_HEADERS or any(key in value for key in keys):
            value = REDACTED
        out[name] = value
    return out


def sent_bytes(acc: Account) -> int:
    """The response body bytes sent so far: a streamed body's count, or a small body's size."""
    if acc.tail is not None:
        return acc.tail.total
    return len(acc.body) if acc.body is not None else 0


def flight_of(
    number: int,
    request: web.BaseRequest,
    acc: Account,
    *,
    proxy_id: str,
    wall: float,
    path: str,
    keys: tuple[str, ...],
) -> InFlight:
    """Request `number` of this process as an in-flight entry (`wall`: the wall clock minus the
    loop clock)."""
    resp = acc.resp_headers
    return InFlight(
        id=f"{proxy_id}-{number}",
        timestamp=wall + acc.started,
        model=acc.model,
        req_path=path,
        method=request.method,
        remote_ip=request.remote or "",
        proxy_id=proxy_id,
        req_headers=header_map(request.headers.items(), keys),
        resp_headers=header_map(resp.items(), keys) if resp is not None else {},
        resp_bytes=sent_bytes(acc),
    )
