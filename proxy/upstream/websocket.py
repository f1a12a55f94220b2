"""Websocket relay: the client's upgrade is handshaken with the upstream first (so its chosen
subprotocol, or its refusal, is what the client gets), then frames are copied both ways as they
come: text, binary, ping and pong (no auto-ping on either side, so the two ends see each other's),
and the close code and reason of whichever side closes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import aiohttp
from aiohttp import WSMsgType, web
from multidict import CIMultiDict
from yarl import URL

from ..floor.errors import BadGateway, ProxyError
from .address import UpstreamAddress
from .forward import upstream_headers

log = logging.getLogger(__name__)

# aiohttp's client makes its own handshake headers; the client's subprotocols are passed on.
_WS_DROP = frozenset(
    {
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
        b"sec-websocket-accept",
    }
)
GOING_AWAY = 1001
INTERNAL_ERROR = 1011

AnyWS = web.WebSocketResponse | aiohttp.ClientWebSocketResponse


def is_websocket(request: web.BaseRequest) -> bool:
    """llama-swap's detection: `Connection` has the token `upgrade`, `Upgrade` has `websocket`
    (case-insensitive, comma lists and repeated headers accepted); and, as RFC 6455 says, only a
    GET upgrades (a POST that asks to is an ordinary POST, its Upgrade dropped as hop-by-hop)."""
    headers = request.headers
    if request.method != "GET" or "Upgrade" not in headers:
        return False
    upgrade = ",".join(headers.getall("Upgrade")).lower()
    connection = ",".join(headers.getall("Connection", ())).lower()
    return "websocket" in upgrade and "upgrade" in {t.strip() for t in connection.split(",")}


def _ws_url(address: UpstreamAddress, path_qs: str) -> URL:
    scheme = "wss" if address.scheme == "https" else "ws"
    return URL(f"{scheme}://{address.hostport}{address.base}{path_qs}", encoded=True)


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
    request: web.BaseRequest,
    session: aiohttp.ClientSession,
    address: UpstreamAddress,
    path_qs: str,
    label: str,
    *,
    host: str | None,
    ignored_in: set[object] | None = None,
    replace_headers: dict[str, str] | None = None,
    changed: Callable[[], None] | None = None,
) -> web.StreamResponse:
    """Relay the websocket `request` to `address` at `path_qs` (raw path and query).

    `host`: the Host for the handshake (None: the client's, as for HTTP; forward.py).
    `session`: the proxy's aiohttp client session.
    `ignored_in`: an ignored websocket's model's set of them (`ModelRuntime.ignored_ws`): it is
    closed when that model stops. `changed`: called when it joins that set and when it leaves it.
    `replace_headers`: headers set on the upstream handshake over the client's (a peer's key).
    """
    protocols = [
        p.strip()
        for value in request.headers.getall("Sec-WebSocket-Protocol", ())
        for p in value.split(",")
        if p.strip()
    ]
    headers: CIMultiDict[str] = CIMultiDict(
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in upstream_headers(request, host, drop=_WS_DROP, replace=replace_headers)
    )
    try:
        upstream = await session.ws_connect(
            _ws_url(address, path_qs),
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
            f"upstream {label} refused the websocket: {exc.status} {exc.message}", status=status
        ) from exc
    except aiohttp.ClientConnectorError as exc:
        raise BadGateway(f"upstream {label} is not reachable: {exc.os_error}") from exc
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise BadGateway(f"upstream {label} websocket failed: {exc!r}") from exc

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
        ignored_in.add(relay)
        if changed is not None:
            changed()
    try:
        await relay.run()
    finally:
        if ignored_in is not None:
            ignored_in.discard(relay)
            if changed is not None:
                changed()
    return client
