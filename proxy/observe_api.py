"""The read-only observability routes the daemon answers (it keeps the activity log and every
Prometheus figure, so each proxy process gives the same answer): `GET /api/metrics/activity`,
`GET /api/metrics/stats` and `GET /metrics`. The proxy passes the query through and the daemon's
document back; a bad parameter is the daemon's 400 in the one error shape."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from ..ipc.client import DaemonUnavailable
from ..ipc.messages import Document, Error, QueryActivity, QueryMetrics, QueryStats, Request
from .context import CTX
from .errors import ProxyError


async def _ask(request: web.Request, make: Callable[[int], Request]) -> web.Response:
    try:
        reply = await request.app[CTX].link.request(make, timeout=10.0)
    except DaemonUnavailable as exc:
        raise ProxyError(503, "the daemon did not answer", "daemon_unavailable") from exc
    if isinstance(reply, Error):
        raise ProxyError.from_reply(reply)
    if not isinstance(reply, Document):
        raise ProxyError(502, f"unexpected reply from the daemon: {type(reply).__name__}")
    response = web.Response(body=reply.body)
    response.headers["Content-Type"] = reply.content_type
    return response


async def handle_activity(request: web.Request) -> web.Response:
    pairs = tuple(request.query.items())
    return await _ask(request, lambda i: QueryActivity(id=i, query=pairs))


async def handle_stats(request: web.Request) -> web.Response:
    model = request.query.get("model", "")
    return await _ask(request, lambda i: QueryStats(id=i, model=model))


async def handle_metrics(request: web.Request) -> web.Response:
    return await _ask(request, lambda i: QueryMetrics(id=i))
