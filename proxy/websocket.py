"""Websocket relay: the client's upgrade is handshaken with the upstream first (so its chosen
subprotocol, or its refusal, is what the client gets), then frames are copied both ways as they
come: text, binary, ping and pong (no auto-ping on either side, so the two ends see each other's),
and the close code and reason of whichever side closes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import WSMsgType, web
from yarl import URL

from .errors import ProxyError
from .forward import HOP_BY_HOP, upstream_headers

if TYPE_CHECKING:
    from .context import ProxyContext
    from .state import ModelRuntime

log = logging.getLogger(__name__)

_WS_DROP = HOP_BY_HOP | {
    "host",
    "content-length",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
    "sec-websocket-accept",
}
GOING_AWAY = 1001
INTERNAL_ERROR = 1011

AnyWS = web.WebSocketResponse | aiohttp.ClientWebSocketResponse


def is_websocket(request: web.Request) -> bool:
    """llama-swap's detection: `Connection` has the token `upgrade`, `Upgrade` has `websocket`
    (case-insensitive, comma lists and repeated headers accepted)."""
    headers = request.headers
    if "Upgrade" not in headers:
        return False
    upgrade = ",".join(headers.getall("Upgrade")).lower()
    connection = ",".join(headers.getall("Connection", ())).lower()
    return "websocket" in upgrade and "upgrade" in {t.strip() for t in connection.split(",")}


def _ws_url(url: str) -> URL:
    if url.startswith("https://"):
        url = "wss://" + url[len("https://") :]
    elif url.startswith("http://"):
        url = "ws://" + url[len("http://") :]
    return URL(url, encoded=True)


class WebSocketRelay:
    def __init__(self, client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse):
        self.client = client
        self.upstream = upstream

    async def run(self) -> None:
        to_up = asyncio.ensure_future(_pump(self.client, self.upstream))
        to_client = asyncio.ensure_future(_pump(self.upstream, self.client))
        try:
            await asyncio.wait({to_up, to_client}, return_when=asyncio.FIRST_COMPLETED)
            # The finished pump closed both sides; let the other one see that and end.
            await asyncio.wait({to_up, to_client}, timeout=10)
        finally:
            for task in (to_up, to_client):
                task.cancel()
            for ws in (self.upstream, self.client):
                if not ws.closed:
                    with contextlib.suppress(Exception):
                        await ws.close(code=GOING_AWAY)

    def close_for_stop(self) -> None:
        """The model is stopping: end both sides with 1001 (ignored websockets only)."""

        async def _close() -> None:
            for ws in (self.client, self.upstream):
                with contextlib.suppress(Exception):
                    await ws.close(code=GOING_AWAY, message=b"model unloaded")

        asyncio.get_running_loop().create_task(_close())


async def _pump(src: AnyWS, dst: AnyWS) -> None:
    while True:
        msg = await src.receive()
        kind = msg.type
        try:
            if kind is WSMsgType.TEXT:
                await dst.send_str(msg.data)
            elif kind is WSMsgType.BINARY:
                await dst.send_bytes(msg.data)
            elif kind is WSMsgType.PING:
                await dst.ping(msg.data)
            elif kind is WSMsgType.PONG:
                await dst.pong(msg.data)
            elif kind is WSMsgType.CLOSE:
                code = msg.data if isinstance(msg.data, int) else 1000
                reason = (msg.extra or "").encode()
                await dst.close(code=code, message=reason)
                await src.close(code=code, message=reason)  # echo the close, as RFC 6455 asks
                return
            elif kind is WSMsgType.CLOSING:
                return  # the other pump is closing this socket
            else:  # CLOSED or ERROR: the peer vanished without a close frame
                await dst.close(code=INTERNAL_ERROR if kind is WSMsgType.ERROR else GOING_AWAY)
                return
        except (ConnectionError, aiohttp.ClientError, RuntimeError) as exc:
            log.debug("websocket relay ended: %r", exc)
            with contextlib.suppress(Exception):
                await src.close(code=GOING_AWAY)
            return


async def relay_websocket(
    request: web.Request,
    ctx: ProxyContext,
    url: str,
    label: str,
    *,
    ignored_in: ModelRuntime | None = None,
    replace_headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    """Relay the websocket `request` to `url` (http(s) form, with raw path and query).

    `ignored_in`: the model of an ignored websocket, which is closed when that model stops.
    `replace_headers`: headers set on the upstream handshake over the client's (a peer's key).
    """
    protocols = [
        p.strip()
        for value in request.headers.getall("Sec-WebSocket-Protocol", ())
        for p in value.split(",")
        if p.strip()
    ]
    headers = upstream_headers(request.headers.items(), _WS_DROP)
    for key, value in (replace_headers or {}).items():
        headers[key] = value
    try:
        upstream = await ctx.session.ws_connect(
            _ws_url(url),
            protocols=protocols,
            headers=headers,
            autoclose=False,
            autoping=False,
            max_msg_size=0,
            compress=0,
        )
    except aiohttp.WSServerHandshakeError as exc:
        status = exc.status if 400 <= exc.status < 500 else 502
        raise ProxyError(
            status, f"upstream {label} refused the websocket: {exc.status} {exc.message}"
        ) from exc
    except aiohttp.ClientConnectorError as exc:
        raise ProxyError(502, f"upstream {label} is not reachable: {exc.os_error}") from exc
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ProxyError(502, f"upstream {label} websocket failed: {exc!r}") from exc

    client = web.WebSocketResponse(
        protocols=(upstream.protocol,) if upstream.protocol else (),
        autoclose=False,
        autoping=False,
        max_msg_size=0,
        compress=False,
    )
    try:
        await client.prepare(request)
    except BaseException:
        await upstream.close()
        raise
    relay = WebSocketRelay(client, upstream)
    if ignored_in is not None:
        ignored_in.ignored_ws.add(relay)
    try:
        await relay.run()
    finally:
        if ignored_in is not None:
            ignored_in.ignored_ws.discard(relay)
    return client
