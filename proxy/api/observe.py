"""The observability routes: `GET /api/metrics/activity`, `GET /api/metrics/stats`,
`GET /metrics`, `GET /api/captures/{id}`, `GET /api/performance` and `GET /api/hardware`, which
the daemon answers (it keeps the activity log,
the captures and every Prometheus figure, so each proxy process gives the same answer: the proxy
passes the query through and the daemon's document back; a bad parameter is the daemon's 400 in
the one error shape); `GET /api/inflight` and `POST /api/inflight/{id}/cancel` from the in-flight
table every proxy mirrors. (`GET /api/version`, in llama-swap's shape or Ollama's, is
`dialects/ollama/routes.py`'s.)"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from aiohttp import web

from ...ipc.activity import flight_json
from ...ipc.messages import (
    CancelInFlight,
    Document,
    QueryActivity,
    QueryCapture,
    QueryHardware,
    QueryMetrics,
    QueryPerformance,
    QueryStats,
    Request,
)
from ..context import CTX
from ..floor.errors import BadRequest, NotFound
from ..observe.events import HUB_KEY


async def _ask(request: web.Request, make: Callable[[int], Request]) -> web.Response:
    reply = await request.app[CTX].link.ask(make, Document)
    response = web.Response(body=reply.body, status=reply.status)
    response.headers["Content-Type"] = reply.content_type
    return response


async def handle_activity(request: web.Request) -> web.Response:
    pairs = tuple(request.query.items())
    return await _ask(request, lambda i: QueryActivity(id=i, query=pairs))


async def handle_stats(request: web.Request) -> web.Response:
    model = request.query.get("model", "")
    return await _ask(request, lambda i: QueryStats(id=i, model=model))


async def handle_capture(request: web.Request) -> web.Response:
    """llama-swap's `GET /api/captures/{id}`: the daemon keeps every proxy's captures."""
    raw = request.match_info["id"]
    try:
        capture = int(raw)
    except ValueError:
        raise BadRequest("invalid capture ID") from None
    return await _ask(request, lambda i: QueryCapture(id=i, capture=capture))


async def handle_metrics(request: web.Request) -> web.Response:
    return await _ask(request, lambda i: QueryMetrics(id=i))


async def handle_performance(request: web.Request) -> web.Response:
    """llama-swap's `/api/performance[?after=RFC3339]`: the daemon's sampler (it starts sampling
    when someone asks: daemon/observe/performance.py)."""
    after = request.query.get("after", "")
    return await _ask(request, lambda i: QueryPerformance(id=i, after=after))


async def handle_hardware(request: web.Request) -> web.Response:
    return await _ask(request, lambda i: QueryHardware(id=i))


_encode = msgspec.json.Encoder().encode


def _json(data: object) -> web.Response:
    return web.Response(body=_encode(data), content_type="application/json")


async def handle_inflight(request: web.Request) -> web.Response:
    hub = request.app[HUB_KEY]
    requests = sorted(hub.in_flight.values(), key=lambda f: f.timestamp)
    return _json({"requests": [flight_json(f) for f in requests]})


async def handle_cancel(request: web.Request) -> web.Response:
    flight = request.match_info["id"]
    ctx = request.app[CTX]
    if not ctx.recorder.cancel(flight):
        if flight not in request.app[HUB_KEY].in_flight:
            raise NotFound("inflight request not found")
        # Another proxy process serves it: the daemon passes the cancel on to every proxy.
        ctx.link.cast_soon(CancelInFlight(id=flight))
    return _json({"msg": "ok"})
