"""A swapd proxy process with stages of the pipeline switched off, for `pipeline_cost.py`.

Run as `python pipeline_stages.py STAGES -- ARGS...`: STAGES is a comma-separated list of what to
switch off (or `-` for none), ARGS are `python -m swapd.proxy`'s. Each switch replaces one
stage's function, before the proxy starts, by what the floor (`pipeline_floor.py`) does in its
place, so the difference in cost is the stage's:

* `activity`: no activity records (`SWAPD_PROXY_ACTIVITY=0`, set by the caller);
* `access`: no access line (the `swapd.proxy.access` logger off, whatever the config says);
* `front`: no front checks (`app.guard` calls the handler at once);
* `model`: the body read, but not searched for the model (the benchmark's model is given);
* `headers`: only Host and Content-Type go upstream, as the floor sends;
* `pipeline`: the whole pipeline (keys to relay) replaced by the floor's handler.

A measuring tool, never a way to run swapd.
"""

from __future__ import annotations

import sys
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


def switch_off(stages: set[str]) -> None:
    from swapd.proxy import dispatch, pipeline
    from swapd.proxy.context import CTX
    from swapd.proxy.observe import access_log
    from swapd.proxy.routing.body import RequestModel
    from swapd.proxy.upstream import forward

    if "access" in stages:

        def never(lines: access_log.AccessLines, table: Any) -> None:
            lines.on = False

        access_log.AccessLines.follow = never  # type: ignore[method-assign]

    if "front" in stages:

        async def no_front(
            ctx: Any, request: web.Request, handler: Any, **_: Any
        ) -> web.StreamResponse:
            return await handler(request)

        dispatch.guard = no_front  # type: ignore[assignment]

    if "model" in stages:

        async def given_model(request: web.Request) -> RequestModel:
            raw = await request.read()
            return RequestModel("bench", "json", raw, raw=raw)

        pipeline.read_model = given_model  # type: ignore[assignment]

    if "headers" in stages:

        def floor_headers(request: web.Request, host: str | None, **_: Any) -> list[Any]:
            ctype = request.headers.get("Content-Type", "").encode()
            return [(b"Host", (host or request.host).encode()), (b"Content-Type", ctype)]

        forward.upstream_headers = floor_headers  # type: ignore[assignment]

    if "pipeline" in stages:

        async def floor_handler(request: web.Request) -> web.StreamResponse:
            ctx = request.app[CTX]
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

        # Before make_app reads it: the route table and dispatch.py both see the stand-in.
        pipeline.handle_model_route = floor_handler  # type: ignore[assignment]


def main() -> int:
    stages, sep, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    assert sep == "--"
    switch_off(set(stages.split(",")) - {"-"})
    from swapd.proxy.__main__ import main as proxy_main

    return proxy_main(args)


if __name__ == "__main__":
    sys.exit(main())
