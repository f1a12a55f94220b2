"""The floor of `proxy_pipeline.py`: aiohttp's server forwarding every request to one upstream
through swapd's lean pool (`swapd.proxy.upstream.pool.UpstreamPool`), with no feature at all
(no keys, no route decision, no model lookup, no admission, no accounting).

Run as `python pipeline_floor.py LISTEN_PORT UPSTREAM_PORT`. It forwards method, path and query,
Content-Type and the body; relays the status, the headers (less the framing ones) and the body,
in one write when the upstream gave a length, piece by piece as it comes otherwise (SSE).
"""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web
from multidict import CIMultiDict

from swapd.proxy.upstream.pool import UpstreamPool

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


def main() -> None:
    listen, upstream = int(sys.argv[1]), int(sys.argv[2])
    pool = UpstreamPool()
    host = b"127.0.0.1:%d" % upstream

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        body = await request.read()
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (
            request.method.encode(),
            request.raw_path.encode(),
            host,
            request.headers.get("Content-Type", "").encode(),
            len(body),
        )
        answer = await pool.request(
            "127.0.0.1", upstream, head, body, head_request=request.method == "HEAD"
        )
        headers = CIMultiDict((k, v) for k, v in answer.headers if k.lower() not in HOP)
        if answer.content_length is not None:
            return web.Response(status=answer.status, body=await answer.read(), headers=headers)
        response = web.StreamResponse(status=answer.status, headers=headers)
        await response.prepare(request)
        async for piece in answer.iter_chunks():
            await response.write(piece)
        await response.write_eof()
        return response

    async def serve() -> None:
        server = web.Server(handle, access_log=None)
        await asyncio.get_running_loop().create_server(server, "127.0.0.1", listen, backlog=4096)
        await asyncio.Event().wait()

    try:
        import uvloop
    except ImportError:
        asyncio.run(serve())
    else:
        uvloop.run(serve())


if __name__ == "__main__":
    main()
