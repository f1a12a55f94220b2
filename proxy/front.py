"""The front checks, the first stage of every request, whichever way it came in (`dispatch.py`):
shutting down -> 503, CORS preflight, ambiguous credentials -> 400, another site's page or a
DNS-rebinding host -> 403 (`origin_check.py`), API keys -> 401, `ProxyError` -> JSON error. One
function, `guard`, which the Application's one middleware (`front`) runs for every route and
`dispatch.Dispatch` for the model routes it serves directly; and `cors_answer`, which gives an
allowed other site's answer its CORS headers as it is prepared."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from aiohttp import web

from .auth import OPEN_PATHS, check_api_key, check_single_credentials
from .context import CTX, ProxyContext
from .floor.errors import ProxyError, error_response
from .mirror.wait import routes_of
from .origin_check import CORS_ORIGIN, check_browser, cors_headers, preflight

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
R = TypeVar("R", bound=web.BaseRequest)


class Guard(Protocol):
    """The front checks, then `handler` (`guard`; a benchmark's stand-in, `dispatch.Stages`)."""

    async def __call__(
        self,
        ctx: ProxyContext,
        request: R,
        handler: Callable[[R], Awaitable[web.StreamResponse]],
        *,
        model_route: bool = ...,
    ) -> web.StreamResponse: ...


@web.middleware
async def front(request: web.Request, handler: Handler) -> web.StreamResponse:
    return await guard(request.app[CTX], request, handler)


async def guard(
    ctx: ProxyContext,
    request: R,
    handler: Callable[[R], Awaitable[web.StreamResponse]],
    *,
    model_route: bool = False,
) -> web.StreamResponse:
    """The front checks, then `handler`: the one first stage, whichever way a request came in
    (the Application's middleware `front`, or `dispatch.Dispatch` for model requests).

    `model_route`: the request is on one of `MODEL_ROUTES` (dispatch.py knows it by its table).
    None of those is an open path, so that lookup is skipped for them
    (`tests/unit/test_proxy_dispatch.py` holds the table to that)."""
    if ctx.closing:
        ctx.stats.refused += 1
        response = error_response(503, "swapd is shutting down", "shutting_down")
        response.force_close()
        return response
    state = ctx.state
    if request.method == "OPTIONS":
        try:
            if "Origin" in request.headers and not state.synced.is_set():
                await routes_of(ctx)  # a browser's: answered by the config's security.cors
            return preflight(request, state.routes.table.cors)
        except ProxyError as exc:
            ctx.stats.refused += 1
            return exc.response()
    ctx.enter()
    try:
        check_single_credentials(request)
        guarded = model_route or request.path not in OPEN_PATHS
        if guarded and not state.synced.is_set():
            # No table yet means no keys known yet: wait for it rather than let anyone in.
            await routes_of(ctx)
        # Before the key: another site's page is refused whatever it presents, and an allowed
        # one can read a 401 too.
        allowed = check_browser(request, state.routes.table.cors)
        if allowed is not None:
            request[CORS_ORIGIN] = allowed
        if guarded:
            keys = state.routes.api_keys
            if keys:
                check_api_key(request, keys)
        return await handler(request)
    except ProxyError as exc:
        ctx.stats.refused += 1
        return exc.response(request.headers.get("Accept", ""))
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.text and not exc.content_type.endswith("json"):
            # aiohttp's own 404/405 (unknown path, wrong method) in the one error shape; an
            # `Allow` header and the like are kept.
            kept = {
                k: v for k, v in exc.headers.items() if k not in ("Content-Type", "Content-Length")
            }
            accept = request.headers.get("Accept", "")
            return error_response(exc.status, exc.text.strip(), headers=kept, accept=accept)
        raise
    finally:
        ctx.leave()


async def cors_answer(request: web.Request, response: web.StreamResponse) -> None:
    """The answer to an allowed other site's request carries its CORS headers (every request
    with an `Origin` comes the Application's way: `dispatch.py`)."""
    origin = request.get(CORS_ORIGIN)
    if origin is not None:
        cors_headers(origin, request.app[CTX].state.routes.table.cors, response.headers)
