"""Streaming HTTP forwarding to an upstream (a local model or a peer).

The request body streams up (or goes as bytes when the proxy had to read it), the response streams
down as it arrives: small bodies of known length in one write, everything else chunk by chunk,
`X-Accel-Buffering: no` on SSE. Hop-by-hop headers are dropped both ways. A client that goes away
cancels the handler (the app runs with handler cancellation), which closes the upstream
connection. An upstream that fails before its headers is a 502; one that fails mid-body ends the
response: a chunked one with its terminating chunk, one of fixed length by closing the connection
(the only way HTTP can say "truncated" there).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from .errors import ProxyError
from .upstream_client import (
    UpstreamBroken,
    UpstreamError,
    UpstreamPool,
    UpstreamResponse,
)

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Also dropped from requests: Host comes from the URL, Content-Length from the body, and an
# `Expect: 100-continue` was already answered by the proxy's own server.
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", "expect"}
_REQUEST_DROP_BYTES = frozenset(name.encode() for name in _REQUEST_DROP)
RESPONSE_DROP = HOP_BY_HOP | {"content-length"}
SMALL_BODY = 256 * 1024


def make_session() -> aiohttp.ClientSession:
    """One session per process: unlimited pooled connections (thousands of concurrent streams),
    no total timeout (generations can run for minutes), raw bytes (no decompression)."""
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30, ttl_dns_cache=300)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
    )


def _request_drop(request: web.Request) -> frozenset[str]:
    """Hop-by-hop headers, plus any the client's `Connection` header names."""
    connection = request.headers.get("Connection")
    if not connection:
        return _REQUEST_DROP
    return _REQUEST_DROP | {t.strip().lower() for t in connection.split(",")}


def upstream_headers(
    headers: Iterable[tuple[str, str]], drop: frozenset[str] = _REQUEST_DROP
) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in headers:
        if key.lower() not in drop:
            out.add(key, value)
    return out


_hostports: dict[str, tuple[str, str, int]] = {}


def split_url(url: str) -> tuple[str, str, int, str]:
    """`http://host:port/path?q` -> (host:port, host, port, /path?q), cached per host:port."""
    rest = url[7:]
    slash = rest.find("/")
    hostport, path_qs = (rest, "/") if slash < 0 else (rest[:slash], rest[slash:])
    cached = _hostports.get(hostport)
    if cached is None:
        host, sep, port = hostport.rpartition(":")
        if not sep or not port.isdigit():
            host, port = hostport, "80"
        cached = (hostport, host.strip("[]"), int(port))
        _hostports[hostport] = cached
    return cached[0], cached[1], cached[2], path_qs


def request_head(
    method: bytes,
    path_qs: bytes,
    hostport: bytes,
    raw_headers: Iterable[tuple[bytes, bytes]],
    connection: str | None,
    framing: bytes,
) -> bytes:
    """The head of a request to a local upstream, built from the client's raw header bytes (no
    decoding and re-encoding): hop-by-hop headers and those the client's `Connection` names are
    dropped, `framing` (a Content-Length or Transfer-Encoding line, or b"") ends it."""
    parts = [b"%s %s HTTP/1.1\r\nHost: %s\r\n" % (method, path_qs, hostport)]
    drop = _REQUEST_DROP_BYTES
    if connection:
        drop = drop | {t.strip().lower().encode() for t in connection.split(",")}
    for key, value in raw_headers:
        if key.lower() not in drop:
            parts += (key, b": ", value, b"\r\n")
    parts += (framing, b"\r\n")
    return b"".join(parts)


async def _forward_lean(
    request: web.Request, pool: UpstreamPool, url: str, body: bytes | None, label: str
) -> web.StreamResponse:
    hostport, host, port, path_qs = split_url(url)
    stream = None
    chunked = False
    if body is not None:
        framing = b"Content-Length: %d\r\n" % len(body)
    elif request.body_exists:
        stream = request.content.iter_any()
        if request.content_length is not None:
            framing = b"Content-Length: %d\r\n" % request.content_length
        else:
            chunked = True
            framing = b"Transfer-Encoding: chunked\r\n"
    else:
        framing = b""
    head = request_head(
        request.method.encode(),
        path_qs.encode("utf-8", "surrogateescape"),
        hostport.encode(),
        request.raw_headers,
        request.headers.get("Connection"),
        framing,
    )
    try:
        upstream = await pool.request(
            host,
            port,
            head,
            body if body is not None else stream,
            head_request=request.method == "HEAD",
            chunked=chunked,
        )
    except UpstreamError as exc:
        raise unreachable(label, exc) from exc
    try:
        return await _relay_lean(request, upstream, label)
    finally:
        upstream.close()


def unreachable(label: str, exc: UpstreamError) -> ProxyError:
    return ProxyError(502, f"upstream {label} is not reachable: {exc}")


def broke_off(label: str, exc: BaseException) -> ProxyError:
    return ProxyError(502, f"upstream {label} failed mid-response: {exc!r}")


async def _relay_lean(
    request: web.Request, upstream: UpstreamResponse, label: str
) -> web.StreamResponse:
    out_headers: CIMultiDict[str] = CIMultiDict()
    for key, value in upstream.headers:
        if key.lower() not in RESPONSE_DROP:
            out_headers.add(key, value)
    return await _relay(
        request,
        upstream.status,
        upstream.reason,
        out_headers,
        upstream.content_length,
        upstream.read,
        upstream.iter_chunks,
        (UpstreamBroken,),
        label,
    )


async def _relay(
    request: web.Request,
    status: int,
    reason: str | None,
    out_headers: CIMultiDict[str],
    length: int | None,
    read_all: Callable[[], Awaitable[bytes]],
    chunks: Callable[[], AsyncIterator[bytes]],
    broken: tuple[type[BaseException], ...],
    label: str,
    on_broken: Callable[[], None] | None = None,
) -> web.StreamResponse:
    """Relay one upstream response, whichever client fetched it: a small body of known length in
    one write, anything else as it arrives. `broken` are the upstream client's "the body broke
    off" errors; such a response is ended the only ways HTTP allows (see the module docstring)."""
    if (
        length is not None
        and length <= SMALL_BODY
        and request.method != "HEAD"
        and status not in (204, 304)
    ):
        try:
            data = await read_all()
        except broken as exc:
            raise broke_off(label, exc) from exc
        return web.Response(status=status, reason=reason, headers=out_headers, body=data)

    response = web.StreamResponse(status=status, reason=reason, headers=out_headers)
    if length is not None:
        response.content_length = length
    if out_headers.get("Content-Type", "").startswith("text/event-stream"):
        response.headers["X-Accel-Buffering"] = "no"
    await response.prepare(request)
    if request.method == "HEAD" or status in (204, 304):
        await response.write_eof()
        return response
    try:
        async for chunk in chunks():
            await response.write(chunk)
    except broken as exc:
        if isinstance(exc, ConnectionResetError) and (
            request.transport is None or request.transport.is_closing()
        ):
            raise  # the client went away: nothing to terminate
        log.warning("upstream %s broke off a response: %r", label, exc)
        if on_broken is not None:
            on_broken()
        if length is None:
            await response.write_eof()  # a chunked body ends cleanly
        elif request.transport is not None:
            request.transport.close()
        return response
    await response.write_eof()
    return response


async def forward(
    request: web.Request,
    session: aiohttp.ClientSession,
    url: str,
    *,
    body: bytes | None = None,
    headers: CIMultiDict[str] | None = None,
    label: str,
    pool: UpstreamPool | None = None,
) -> web.StreamResponse:
    """Send `request` to `url` (already joined, raw-escaped, with query) and relay the answer.

    `body` replaces the request body (it was read to find the model); otherwise the body streams.
    `headers` are the upstream request headers; default: the client's minus hop-by-hop ones.
    `label` names the upstream in error messages. With `pool`, plain `http://` upstreams without
    custom headers (local models) go through the lean client; the rest through aiohttp.
    """
    if pool is not None and headers is None and url.startswith("http://"):
        return await _forward_lean(request, pool, url, body, label)
    return await _forward_aiohttp(request, session, url, body=body, headers=headers, label=label)


async def _forward_aiohttp(
    request: web.Request,
    session: aiohttp.ClientSession,
    url: str,
    *,
    body: bytes | None = None,
    headers: CIMultiDict[str] | None = None,
    label: str,
) -> web.StreamResponse:
    if headers is None:
        headers = upstream_headers(request.headers.items(), _request_drop(request))
    data: object
    if body is not None:
        data = body
    elif request.body_exists:
        data = request.content
        if request.content_length is not None:
            headers["Content-Length"] = str(request.content_length)
    else:
        data = None
    try:
        upstream = await session.request(
            request.method,
            URL(url, encoded=True),
            headers=headers,
            data=data,
            allow_redirects=False,
            compress=None,
        )
    except aiohttp.ClientConnectorError as exc:
        raise ProxyError(502, f"upstream {label} is not reachable: {exc.os_error}") from exc
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ProxyError(502, f"upstream {label} failed before answering: {exc!r}") from exc
    try:
        return await _relay(
            request,
            upstream.status,
            upstream.reason,
            upstream_headers(upstream.headers.items(), RESPONSE_DROP),
            upstream.content_length,
            upstream.read,
            upstream.content.iter_any,
            (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError),
            label,
            on_broken=upstream.close,
        )
    finally:
        upstream.release()
