"""The forward stage, from the pipeline's side: one request on its way upstream as one record
(`Forwarding`, made once the route decision serves it), sent to a local model's upstream (`send`)
or to a peer (`serve_peer`). What goes upstream and how the reply comes back are `upstream/`'s
(`forward.outgoing`, `forward.forward`, `websocket.relay_websocket`).
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from .context import ProxyContext
from .floor.account import Account
from .floor.errors import BadGateway, ProxyError
from .mirror.state import ModelRuntime
from .routing import decide
from .routing.body import RequestModel
from .routing.rewrite import outgoing_body
from .upstream.address import UpstreamAddress
from .upstream.forward import ReplyRewrite, forward, outgoing
from .upstream.websocket import relay_websocket


class Forwarding(msgspec.Struct):
    """One request the route decision serves, handed whole to every stage after it (admission,
    the forward, the relay). `found`: the model the request named and its body as read;
    `rewrite`: a dialect's rewrite of the reply (`dialects/`), None to relay it as it is. `body`,
    `plain` and `path_qs` are what goes upstream (`outgoing`). A msgspec `Struct` built by
    keywords, as `decide.Serve` is (a tenth of a keyword-built dataclass's cost); never encoded."""

    request: web.BaseRequest
    ctx: ProxyContext
    acc: Account
    decision: decide.Serve
    found: RequestModel | None = None
    rewrite: ReplyRewrite | None = None
    # The body to send (None: streamed as the client sends it), whether it is a rewrite, and the
    # path and query below the upstream's base; set by `outgoing`.
    body: bytes | None = None
    plain: bool = False
    path_qs: str = ""

    def outgoing(self) -> None:
        """The body and target the decision asks for (`routing/rewrite.py`)."""
        self.body, self.plain, self.path_qs = outgoing_body(self.found, self.decision)


async def send(
    fwd: Forwarding,
    rt: ModelRuntime,
    address: UpstreamAddress,
    into: web.StreamResponse | None = None,
) -> web.StreamResponse:
    """`fwd` to `rt`'s model at `address`; `into`: the response the loading progress began."""
    request, ctx, decision = fwd.request, fwd.ctx, fwd.decision
    host = address.hostport if rt.route.host_header == "upstream" else None
    if decision.websocket:
        ctx.stats.websockets += 1
        ignored_in = rt.ignored_ws if not decision.admitted else None
        return await relay_websocket(
            request,
            ctx.session,
            address,
            fwd.path_qs,
            rt.id,
            host=host,
            ignored_in=ignored_in,
            changed=lambda: ctx.admission.sockets_changed(rt),
        )
    out = outgoing(
        request,
        address,
        fwd.path_qs,
        host=host,
        body=fwd.body,
        plain=fwd.plain,
        lines=ctx.upstream_headers,
    )
    out.timeouts = rt.route.timeouts
    transport = ctx.lean if address.lean else ctx.aiohttp
    return await forward(
        request, fwd.acc, transport, out, rt.id, ctx.streams, into=into, rewrite=fwd.rewrite
    )


async def serve_peer(fwd: Forwarding) -> web.StreamResponse:
    """A peer's model: never starts, swaps or counts against anything local. The peer's
    `apiKey` (if set) replaces both `Authorization` and `x-api-key`."""
    request, ctx, acc = fwd.request, fwd.ctx, fwd.acc
    target = fwd.decision.peer
    assert target is not None
    peer = target.peer
    acc.model = f"{peer.id}/{target.model}"
    acc.route = "peer"
    ctx.stats.peer += 1
    fwd.outgoing()
    keys = (
        {"Authorization": f"Bearer {peer.api_key}", "x-api-key": peer.api_key}
        if peer.api_key
        else None
    )
    host = target.address.hostport
    label = f"peer {peer.id}"
    if fwd.decision.websocket:
        ctx.stats.websockets += 1
        return await relay_websocket(
            request,
            ctx.session,
            target.address,
            fwd.path_qs,
            label,
            host=host,
            replace_headers=keys,
        )
    out = outgoing(
        request,
        target.address,
        fwd.path_qs,
        host=host,
        body=fwd.body,
        plain=fwd.plain,
        replace=keys,
        lines=ctx.upstream_headers,
    )
    out.timeouts = peer.timeouts
    try:
        return await forward(
            request, acc, ctx.aiohttp, out, label, ctx.streams, rewrite=fwd.rewrite
        )
    except ProxyError as exc:
        if exc.status == 502:
            raise BadGateway(f"peer proxy error: {exc.message}") from exc
        raise
