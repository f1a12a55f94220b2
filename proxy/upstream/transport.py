"""The one small interface every HTTP exchange with an upstream goes through, and its two
transports (as httpx's transports share one):

* `LeanTransport`: the llhttp keep-alive pool (`pool.UpstreamPool`) for plain `http://`
  upstreams, local models' usually;
* `AiohttpTransport`: aiohttp's client, for `https://` and for peers.

`send(Outgoing)` returns a `Reply` once the response head has arrived, or raises
`UpstreamError` (nothing usable arrived: a 502). A `Reply`'s `read` and `iter_chunks` raise
`UpstreamBroken` when the body breaks off. `relay.py` relays any `Reply` by the same rules.
Websocket handshakes go through the aiohttp session too (`websocket.py`), with the same header
rules (`forward.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from ...ipc.routing_table import Timeouts
from ..floor.errors import HeadTimeout, UpstreamBroken, UpstreamError, UpstreamRefused
from .address import UpstreamAddress
from .pool import IDEMPOTENT, UpstreamPool

__all__ = [
    "AiohttpTransport",
    "LeanTransport",
    "Outgoing",
    "Reply",
    "Transport",
    "make_session",
]

# A streamed request body announced at most this long is read whole before it is sent, so that it
# can be sent again on a fresh connection (nginx buffers every body; Go replays what it can).
REPLAYABLE = 64 * 1024


@dataclass(slots=True)
class Outgoing:
    """One request to send. `target` is the request target (the address's base path included,
    escaped as the client sent it); `headers` are complete but for the framing, which comes from
    `body` and `length`: bytes go with their Content-Length, a stream with `length` as its
    Content-Length, or chunked when `length` is None."""

    method: str
    address: UpstreamAddress
    target: str
    headers: list[tuple[bytes, bytes]]
    body: bytes | AsyncIterator[bytes] | None = None
    length: int | None = None
    # The model's or peer's `timeouts` (None: the transport's defaults, no head limit).
    timeouts: Timeouts | None = None


class Reply(Protocol):
    status: int
    reason: str
    headers: list[tuple[str, str]]
    content_length: int | None

    async def read(self) -> bytes: ...

    def iter_chunks(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...


class Transport(Protocol):
    async def send(self, out: Outgoing) -> Reply: ...


class LeanTransport:
    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool

    async def send(self, out: Outgoing) -> Reply:
        body = out.body
        chunked = False
        if body is not None and not isinstance(body, bytes):
            if out.length is not None and out.length <= REPLAYABLE:
                # Small and announced: read whole, so the pool can send it again (`pool.py`).
                body = b"".join([chunk async for chunk in body])
        if isinstance(body, bytes):
            framing = b"Content-Length: %d\r\n" % len(body)
        elif body is None:
            framing = b""
        elif out.length is not None:
            framing = b"Content-Length: %d\r\n" % out.length
        else:
            chunked = True
            framing = b"Transfer-Encoding: chunked\r\n"
        parts = [
            b"%s %s HTTP/1.1\r\n"
            % (out.method.encode(), out.target.encode("utf-8", "surrogateescape"))
        ]
        for key, value in out.headers:
            parts += (key, b": ", value, b"\r\n")
        parts += (framing, b"\r\n")
        address = out.address
        return await self.pool.request(
            address.host,
            address.port,
            b"".join(parts),
            body,
            head_request=out.method == "HEAD",
            chunked=chunked,
            idempotent=out.method in IDEMPOTENT,
            timeouts=out.timeouts,
        )


_BROKEN = (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError)


class _AiohttpReply:
    __slots__ = ("_cut", "_response", "content_length", "headers", "reason", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self._cut = False
        self.status = response.status
        self.reason = response.reason or ""
        self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers]
        self.content_length = 0 if self.status in (204, 304) else response.content_length

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except _BROKEN as exc:
            raise UpstreamBroken(repr(exc)) from exc

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except _BROKEN as exc:
            raise UpstreamBroken(repr(exc)) from exc
        if self._cut:
            raise UpstreamBroken("the response was cut off")

    def close(self) -> None:
        if self._response.content.at_eof():
            self._response.release()  # back to the pool
        else:
            self._cut = True
            self._response.close()


class AiohttpTransport:
    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def send(self, out: Outgoing) -> Reply:
        headers: CIMultiDict[str] = CIMultiDict(
            (k.decode("latin-1"), v.decode("latin-1")) for k, v in out.headers
        )
        if out.body is not None and not isinstance(out.body, bytes) and out.length is not None:
            headers["Content-Length"] = str(out.length)
        address = out.address
        url = URL(f"{address.scheme}://{address.hostport}{out.target}", encoded=True)
        limits = out.timeouts
        head_wait = limits.response_header if limits is not None else 0.0
        try:
            async with asyncio.timeout(head_wait or None):
                response = await self.session.request(
                    out.method,
                    url,
                    headers=headers,
                    data=out.body,
                    allow_redirects=False,
                    compress=None,
                    timeout=_client_timeout(limits, address.scheme == "https"),
                )
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, ConnectionRefusedError):
                raise UpstreamRefused(str(exc.os_error)) from exc
            raise UpstreamError(str(exc.os_error)) from exc
        except aiohttp.ClientError as exc:  # its connect timeouts too
            raise UpstreamError(f"failed before answering: {exc!r}") from exc
        except TimeoutError as exc:  # asyncio.timeout's: the head did not come in time
            raise HeadTimeout(
                f"timeout awaiting response headers ({head_wait:g}s, timeouts.responseHeader)"
            ) from exc
        return _AiohttpReply(response)


def _client_timeout(limits: Timeouts | None, tls: bool) -> aiohttp.ClientTimeout | None:
    """aiohttp's limits from `timeouts`: `connect` bounds the TCP connect, and with TLS the
    connect plus `tlsHandshake` bound getting a connection (aiohttp times the handshake only as
    part of that). None: the session's."""
    if limits is None:
        return None
    connect = limits.connect or None
    whole = connect + limits.tls_handshake if tls and connect and limits.tls_handshake else None
    return aiohttp.ClientTimeout(total=None, sock_connect=connect, connect=whole)


def make_session() -> aiohttp.ClientSession:
    """One session per process: unlimited pooled connections (thousands of concurrent streams),
    no total timeout (generations can run for minutes), raw bytes (no decompression), and no
    headers of its own (the client's go through)."""
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30, ttl_dns_cache=300)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
    )
