"""Forwarding to peers (`peers.<name>`): another llama-swap or swapd, or any OpenAI-compatible API.

A peer model is addressed as `<peer>/<model>`, or by its bare name when exactly one peer lists it
and no local model or alias has that name (local always wins). The request goes to the peer's
`proxy` URL joined with the request path (its base path kept, e.g. `https://host/api` +
`/v1/chat/completions`), with the peer's `apiKey` (if set) replacing both `Authorization: Bearer`
and `x-api-key`, and `model` rewritten to the id the peer knows. Peer requests never start, swap or
count against anything local. A peer that fails answers 502 `peer proxy error: ...`.
"""

from __future__ import annotations

import urllib.parse

from aiohttp import web

from .body import RequestModel, filter_json, replace_span
from .context import ProxyContext
from .errors import ProxyError
from .forward import forward, upstream_headers
from .state import PeerTarget
from .websocket import is_websocket, relay_websocket


def _with_query_model(path_qs: str, model: str) -> str:
    path, sep, query = path_qs.partition("?")
    pairs = [
        (k, model if k == "model" else v)
        for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)
    ]
    return path + "?" + urllib.parse.urlencode(pairs) if sep else path


async def serve_peer(
    request: web.Request,
    ctx: ProxyContext,
    target: PeerTarget,
    path_qs: str,
    *,
    found: RequestModel | None = None,
) -> web.StreamResponse:
    """Forward to `target`'s peer. `found` is the model read from the request (model routes);
    None for `/upstream/` passthrough, whose body is not inspected."""
    peer = target.peer
    body = found.body if found is not None else None
    if found is not None:
        rewrite = target.model if found.name != target.model else None
        if found.kind == "json" and body is not None:
            filters = peer.filters
            if rewrite is not None or filters.strip_params or filters.set_params:
                body = filter_json(
                    body, model=rewrite, strip=filters.strip_params, set_params=filters.set_params
                )
        elif found.kind == "multipart" and found.model_span and rewrite and body is not None:
            body = replace_span(body, found.model_span, rewrite)
        elif found.kind == "query" and rewrite:
            path_qs = _with_query_model(path_qs, rewrite)
    keys = (
        {"Authorization": f"Bearer {peer.api_key}", "x-api-key": peer.api_key}
        if peer.api_key
        else {}
    )
    url = peer.proxy.rstrip("/") + path_qs
    if is_websocket(request):
        return await relay_websocket(
            request,
            ctx,
            url,
            f"peer {peer.id}",
            replace_headers=keys,
        )
    headers = upstream_headers(request.headers.items())
    headers.update(keys)
    if body is None and request.body_exists and request.content_length is not None:
        headers["Content-Length"] = str(request.content_length)
    try:
        return await forward(
            request, ctx.session, url, body=body, headers=headers, label=f"peer {peer.id}"
        )
    except ProxyError as exc:
        if exc.status == 502:
            raise ProxyError(502, f"peer proxy error: {exc.message}") from exc
        raise
