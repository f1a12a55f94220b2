"""The first file of every request's way: which way it comes in, and the stages it goes through.

The handler of aiohttp's low-level server (`web.Server`, set up in `server.py`) is `Dispatch`. A
model request (the method and path of a plain route whose handler is the pipeline's
`handle_model_route`, with no `Expect` and no `Origin` header) goes straight to the front checks
and the pipeline (`Stages.front`, `Stages.model_route`: `front.guard`, `pipeline.serve_model`,
handed the proxy's context); every other request goes to the `web.Application` (`app.py`: its
router, its middleware `front.front`, which runs the same `guard`). Nothing is decided twice: the
table is read from the Application's own router once it is set up, so a route added there is
found there, and the front checks are one function both ways call.

A request's way, stage by stage (docs/architecture.md, "Inside the proxy"):

0. the head: `server.py`, `connection.py` (aiohttp's parser, the head's and the body's clocks)
1. the front checks: `front.guard` (shutting down, CORS, credentials, other sites, API keys)
2. the route decision: `pipeline.py` (the model named: `routing/body.py`; then
   `routing/decide.py`, a pure function -> serve, refuse, redirect); what it serves travels on
   as one record, `forwarding.Forwarding`
3. admission: `admission.py`, one `async with` per request (the 429, in flight, the daemon's
   `Ensure` in `pipeline._admit`)
4. forward: `forwarding.py`, then `upstream/forward.py` and its transports
5. relay: `upstream/relay.py`, `upstream/websocket.py`
6. accounting: `observe/` through the context (`ctx.recorder`, `ctx.stats`, `ctx.lines`)

`Stages` names the ones a benchmark may put a stand-in for, each with swapd's own as its default.

Why two ways in: the Application's dispatch (resolving the route, building and freezing its match
info, the middleware chain) costs a few microseconds per request that a table lookup does not, on
the requests whose rate matters most. A model request served this way has no match info and so
no `request.app`: the pipeline never asks for it (it takes the context as an argument and the
request as aiohttp's `BaseRequest`, which has no `app`, so the type check holds it to that).
`Expect: 100-continue` goes the Application's way, which answers it; any other expectation is
answered here, 417 (RFC 9110 §10.1.1), before the Application's default expect handler, which
echoes the value into a text body and, for a value that is not UTF-8, failed with a 500 and a
traceback. A request with an `Origin` (a browser's) goes the Application's way too: an allowed
other site's answer gets its CORS headers as it is prepared (`front.cors_answer`, aiohttp's
`on_response_prepare`, which only the Application's requests have).

Every request, either way, tells its connection when its handling begins and ends: the head's
clock (`connection.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11

from . import pipeline
from .connection import SwapdRequestHandler
from .context import ModelReader, ProxyContext
from .floor.errors import error_response
from .front import Guard, guard
from .observe.stats import Stats
from .routing.body import read_model
from .upstream.forward import HeaderLines, upstream_headers

AppHandler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
ModelRoute = Callable[[ProxyContext, web.BaseRequest], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Stages:
    """The stages of a model request that a benchmark may put a stand-in for, to measure what
    each one costs (`benchmarks/harness/pipeline_stages.py`, which `benchmarks/pipeline_cost.py`
    runs row by row); every default is swapd's own, and swapd never passes any other.

    Each is read once, at start-up, into the place that calls it (`Dispatch` here, the context
    in `app.make_app`, `observe/access_log.AccessLines`), so a stand-in costs a request nothing,
    and the hooks are typed: a stage renamed or reshaped fails the type check and the
    benchmark's start, never silently."""

    # 1. The front checks of the model routes `Dispatch` serves.
    front: Guard = guard
    # 2. Finding the model a request names (`ctx.read_model`).
    read_model: ModelReader = read_model
    # 4. The header lines that go upstream (`ctx.upstream_headers`).
    upstream_headers: HeaderLines = upstream_headers
    # 2 to 6: the whole pipeline of the model routes `Dispatch` serves.
    model_route: ModelRoute = pipeline.serve_model
    # 6. Access lines at all, whatever the config's `logLevel` says.
    access_lines: bool = True


def model_routes(app: web.Application) -> dict[tuple[str, str], web.AbstractRoute]:
    """(method, path) -> route, for every plain route the pipeline's model handler serves.
    Where the router has more than one route for a method and path, the first registered wins,
    as in its own resolution (and a `*` route takes every method of its path)."""
    table: dict[tuple[str, str], web.AbstractRoute] = {}
    taken: set[tuple[str, str]] = set()
    for route in app.router.routes():  # in registration order
        resource = route.resource
        if not isinstance(resource, web.PlainResource):
            continue
        path = resource.canonical
        if (route.method, path) in taken or (hdrs.METH_ANY, path) in taken:
            continue
        taken.add((route.method, path))
        if route.handler is not pipeline.handle_model_route or route.method == hdrs.METH_ANY:
            continue
        table[(route.method, path)] = route
    return table


class Dispatch:
    """`web.Server`'s request handler: model requests to the front checks and the pipeline
    (`stages`), the rest to `to_app` (the Application's own handler)."""

    __slots__ = ("_ctx", "_guard", "_routes", "_serve", "_to_app")

    def __init__(
        self, ctx: ProxyContext, app: web.Application, to_app: AppHandler, stages: Stages
    ) -> None:
        self._ctx = ctx
        self._to_app = to_app
        self._routes = frozenset(model_routes(app))
        self._guard = stages.front
        self._serve = functools.partial(stages.model_route, ctx)

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        # Every connection is one of server.py's.
        conn: SwapdRequestHandler = request.protocol  # type: ignore[assignment]
        # Its head is complete: the head's clock stops (connection.py).
        conn.handling = True
        conn.head_since = 0.0
        conn.request = request
        body = conn.body = request.content
        if not body.is_eof():  # a body yet to come: its clock runs (connection.py)
            conn.body_expected()
        try:
            raw = request.raw_path
            # The table's paths have no `%` and no query: a raw path with either (or an
            # absolute-form target) is looked up as the router would, by its decoded path.
            path = raw if "?" not in raw and "%" not in raw and raw[:1] == "/" else None
            key = (request.method, path or request.rel_url.path_safe)
            if hdrs.EXPECT in request.headers:
                return unmet_expectation(request, self._ctx.stats) or await self._to_app(request)
            if key not in self._routes or hdrs.ORIGIN in request.headers:
                return await self._to_app(request)
            return await self._guard(self._ctx, request, self._serve, model_route=True)
        finally:
            conn.handling = False  # what it did not read of its body may still come


def unmet_expectation(request: web.BaseRequest, stats: Stats) -> web.Response | None:
    """A 417 for an `Expect` other than `100-continue` (the only expectation HTTP defines), in
    the one error shape and without the value, which may be any bytes; None for `100-continue`
    and for an HTTP/1.0 request, whose server ignores `Expect`. `stats`: the proxy's counters."""
    if request.version < HttpVersion11:
        return None
    values = request.headers.getall(hdrs.EXPECT)
    if all(value.lower() == "100-continue" for value in values):
        return None
    stats.refused += 1
    return error_response(417, 'expectation failed: only "Expect: 100-continue" is supported')
