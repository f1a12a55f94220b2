"""The in-flight entry of a request, as llama-swap's web UI reads it (`/api/events` `inflight`):
its request headers (the UI shows the user agent and the session headers of `ui.activity`), the
response's headers once they came, and the body bytes sent so far.

Headers are one value per name (the first, as llama-swap's `headerMap`), sent as they are: the
daemon redacts the credentials in them when it takes the entry, with the captures' rules (by
name, and any value holding a configured key: daemon/observe/captures.py), before any client
sees it.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from ...ipc.activity import InFlight
from ..floor.account import Account


def header_map(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in pairs:
        out.setdefault(name, value)
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
        req_headers=header_map(request.headers.items()),
        resp_headers=header_map(resp.items()) if resp is not None else {},
        resp_bytes=sent_bytes(acc),
    )
