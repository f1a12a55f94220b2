"""What goes upstream: the request the client sent, as it sent it, apart from documented rewrites.

* Headers: the client's raw header lines in their order, minus hop-by-hop ones (and those its
  `Connection` names), `Content-Length`/`Transfer-Encoding` (the body is framed again, with a
  length that describes exactly the bytes sent) and `Expect` (the proxy's server answered it).
* `Host`: the client's, unchanged, for local models (web apps such as ComfyUI compare it with
  `Origin`, which passes untouched too); a model with `hostHeader: upstream` gets its upstream's
  own `host:port` instead. Peers always get their own host (they are other servers, maybe TLS).
* `X-Forwarded-For` (the client's address appended to any it sent), `X-Forwarded-Host` (the
  client's Host) and `X-Forwarded-Proto` (`http`), like Go's reverse proxy.
* The body: the bytes received, streamed (never decompressed: the proxy's server runs with
  `auto_decompress=False`), or the bytes the pipeline read and maybe rewrote (`body.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from aiohttp import web

from ..floor.account import Account
from ..floor.errors import BadGateway, Refused, UpstreamError, UpstreamRefused
from .address import UpstreamAddress
from .relay import HOP_BY_HOP, Streams, relay
from .transport import Outgoing, Reply, Transport

_FORWARDED = frozenset({b"x-forwarded-for", b"x-forwarded-host", b"x-forwarded-proto"})
REQUEST_DROP = (
    frozenset(name.encode() for name in HOP_BY_HOP)
    | {b"content-length", b"expect", b"host"}
    | _FORWARDED
)
_ENCODING = b"content-encoding"

# A dialect's rewrite of the upstream's reply into its own API's shape (`proxy/dialects/`),
# given the request's account; it answers a `Reply` the relay carries like any other.
ReplyRewrite = Callable[[Reply, Account], Awaitable[Reply]]


class HeaderLines(Protocol):
    """What makes the header lines for the upstream (`upstream_headers`; a benchmark's stand-in,
    `dispatch.Stages`)."""

    def __call__(
        self,
        request: web.BaseRequest,
        host: str | None,
        *,
        drop: frozenset[bytes] = ...,
        replace: Mapping[str, str] | None = ...,
    ) -> list[tuple[bytes, bytes]]: ...


def _drop_set(request: web.BaseRequest, drop: frozenset[bytes]) -> frozenset[bytes]:
    """`drop` and the names the client's `Connection` header lists (hop-by-hop too)."""
    for value in request.headers.getall("Connection", ()):
        drop = drop | {t.strip().lower().encode("latin-1") for t in value.split(",")}
    return drop


def upstream_headers(
    request: web.BaseRequest,
    host: str | None,
    *,
    drop: frozenset[bytes] = frozenset(),
    replace: Mapping[str, str] | None = None,
) -> list[tuple[bytes, bytes]]:
    """The header lines for the upstream: `host` is the Host to send (None: the client's, or
    none when it sent none); `drop` are further names (lower-case bytes) to leave out; `replace`
    are headers set over the client's (a peer's key)."""
    headers = request.headers
    names = REQUEST_DROP | drop if drop else REQUEST_DROP
    if replace:
        names = names | {k.lower().encode() for k in replace}
    if "Connection" in headers:
        names = _drop_set(request, names)
    client_host = headers.get("Host")
    sent_host = host if host is not None else client_host
    out = [(b"Host", sent_host.encode("latin-1", "replace"))] if sent_host else []
    out += [item for item in request.raw_headers if item[0].lower() not in names]
    if replace:
        out += [(k.encode(), v.encode("latin-1", "replace")) for k, v in replace.items()]
    remote = (request.remote or "").encode()
    if "X-Forwarded-For" in headers:
        prior = ", ".join(headers.getall("X-Forwarded-For")).encode("latin-1", "replace")
        remote = prior + b", " + remote
    out.append((b"X-Forwarded-For", remote))
    if client_host:
        out.append((b"X-Forwarded-Host", client_host.encode("latin-1", "replace")))
    out.append((b"X-Forwarded-Proto", b"https" if request.secure else b"http"))
    return out


def outgoing(
    request: web.BaseRequest,
    address: UpstreamAddress,
    path_qs: str,
    *,
    host: str | None,
    body: bytes | None = None,
    plain: bool = False,
    replace: Mapping[str, str] | None = None,
    lines: HeaderLines = upstream_headers,
) -> Outgoing:
    """The request for `address` at `path_qs`. `body`: bytes the pipeline read (None: stream what
    arrives); `plain`: those bytes are a decoded rewrite, so the client's Content-Encoding no
    longer describes them; `lines`: what makes its header lines (the context's)."""
    drop = frozenset({_ENCODING}) if plain else frozenset()
    headers = lines(request, host, drop=drop, replace=replace)
    out = Outgoing(request.method, address, address.base + path_qs, headers)
    if body is not None:
        out.body = body
    elif request.body_exists:
        out.body = request.content.iter_any()
        out.length = request.content_length
    return out


def unreachable(label: str, exc: UpstreamError) -> BadGateway:
    """The transport's failure before a response head, as the client's 502 says it."""
    kind = Refused if isinstance(exc, UpstreamRefused) else BadGateway
    return kind(f"upstream {label} is not reachable: {exc}")


async def forward(
    request: web.BaseRequest,
    acc: Account,
    transport: Transport,
    out: Outgoing,
    label: str,
    streams: Streams,
    *,
    into: web.StreamResponse | None = None,
    rewrite: ReplyRewrite | None = None,
) -> web.StreamResponse:
    """Send `out` and relay the answer; `acc` is the request's account (the time to the
    upstream's head goes in it); `label` names the upstream in error messages; `streams`: the
    proxy's streaming replies (relay.py); `into`: a response already sent (a loading stream)
    the answer's body continues; `rewrite`: a dialect's rewrite of the answer (the relay
    carries what it makes)."""
    acc.forwarding = True  # a drain's bound looks at it (`drain_bound.py`)
    try:
        try:
            reply = await transport.send(out)
        except UpstreamError as exc:
            raise unreachable(label, exc) from exc
        acc.ttfb = asyncio.get_running_loop().time() - acc.started
        try:
            if rewrite is not None:
                reply = await rewrite(reply, acc)  # closing it closes the upstream's
            return await relay(request, reply, label, acc, streams, into=into)
        finally:
            reply.close()
    finally:
        acc.forwarding = False
