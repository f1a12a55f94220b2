"""A swapd proxy process with stages of the pipeline switched off, for `pipeline_cost.py`.

Run as `python pipeline_stages.py STAGES -- ARGS...`: STAGES is a comma-separated list of what to
switch off (or `-` for none), ARGS are `python -m swapd.proxy`'s. Each switch puts, in place of
one stage, what the floor (`pipeline_floor.py`) does there, so the difference in cost is the
stage's. The switches are the proxy's own hooks (`swapd.proxy.dispatch.Stages`, handed to its
`main`): nothing is patched by name, and a hook renamed or reshaped fails the type check and
this start, never silently.

* `activity`: no activity records (`SWAPD_PROXY_ACTIVITY=0`, set by the caller);
* `access`: no access line (`Stages.access_lines`, whatever the config says);
* `front`: no front checks (`Stages.front` calls the handler at once);
* `model`: the body read, but not searched for the model (`Stages.read_model`: the benchmark's
  model is given);
* `headers`: only Host and Content-Type go upstream, as the floor sends (`Stages.upstream_headers`);
* `pipeline`: the whole pipeline (keys to relay) replaced by the floor's handler
  (`Stages.model_route`).

A measuring tool, never a way to run swapd.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from aiohttp import web
from multidict import CIMultiDict

from swapd.proxy.context import ProxyContext
from swapd.proxy.dispatch import Stages
from swapd.proxy.routing.body import RequestModel

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}
SWITCHES = frozenset({"activity", "access", "front", "model", "headers", "pipeline"})
R = TypeVar("R", bound=web.BaseRequest)


async def no_front(
    ctx: ProxyContext,
    request: R,
    handler: Callable[[R], Awaitable[web.StreamResponse]],
    *,
    model_route: bool = False,
) -> web.StreamResponse:
    return await handler(request)


async def given_model(request: web.BaseRequest) -> RequestModel:
    raw = await request.read()
    return RequestModel("bench", "json", raw, raw=raw)


def floor_headers(
    request: web.BaseRequest,
    host: str | None,
    *,
    drop: frozenset[bytes] = frozenset(),
    replace: Mapping[str, str] | None = None,
) -> list[tuple[bytes, bytes]]:
    ctype = request.headers.get("Content-Type", "").encode()
    return [(b"Host", (host or request.host).encode()), (b"Content-Type", ctype)]


async def floor_handler(ctx: ProxyContext, request: web.BaseRequest) -> web.StreamResponse:
    address = ctx.state.runtimes["bench"].address
    body = await request.read()
    head = b"%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
    head %= (
        request.method.encode(),
        request.raw_path.encode(),
        address.hostport.encode(),
        request.headers.get("Content-Type", "").encode(),
        len(body),
    )
    answer = await ctx.pool.request(address.host, address.port, head, body)
    headers = CIMultiDict((k, v) for k, v in answer.headers if k.lower() not in _HOP)
    return web.Response(status=answer.status, body=await answer.read(), headers=headers)


def stages_off(off: set[str]) -> Stages:
    """The proxy's stage hooks with the stages in `off` switched off (`activity` is the
    environment's, set by the caller)."""
    unknown = off - SWITCHES
    if unknown:
        raise ValueError(f"no such stage switch: {', '.join(sorted(unknown))}")
    own = Stages()
    return Stages(
        front=no_front if "front" in off else own.front,
        read_model=given_model if "model" in off else own.read_model,
        upstream_headers=floor_headers if "headers" in off else own.upstream_headers,
        model_route=floor_handler if "pipeline" in off else own.model_route,
        access_lines="access" not in off,
    )


def main() -> int:
    stages, sep, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    assert sep == "--"
    from swapd.proxy.__main__ import main as proxy_main

    return proxy_main(args, stages=stages_off(set(stages.split(",")) - {"-"}))


if __name__ == "__main__":
    sys.exit(main())
