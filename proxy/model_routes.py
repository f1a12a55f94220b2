"""Routes dispatched by the request's `model` (OpenAI, Anthropic, llama.cpp, stable-diffusion)."""

from __future__ import annotations

from aiohttp import web

from ..ipc.messages import RouteModel
from .body import RequestModel, filter_json, read_model, replace_span
from .context import CTX
from .dispatch import serve_local
from .errors import ProxyError
from .peers import serve_peer
from .sync_wait import routes_of

# (method, path): the model comes from a JSON body, a multipart form, or ?model= (body.py).
MODEL_ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/responses"),
    ("POST", "/v1/embeddings"),
    ("POST", "/v1/audio/speech"),
    ("POST", "/v1/audio/transcriptions"),
    ("POST", "/v1/audio/translations"),
    ("POST", "/v1/audio/voices"),
    ("GET", "/v1/audio/voices"),
    ("POST", "/v1/images/generations"),
    ("POST", "/v1/images/edits"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("POST", "/v1/rerank"),
    ("POST", "/v1/reranking"),
    ("POST", "/rerank"),
    ("POST", "/reranking"),
    ("POST", "/infill"),
    ("POST", "/completion"),
    ("POST", "/sdapi/v1/txt2img"),
    ("POST", "/sdapi/v1/img2img"),
    ("GET", "/sdapi/v1/loras"),
    ("GET", "/props"),
)


async def handle_model_request(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CTX]
    found = await read_model(request)
    state = ctx.state
    routes = state.routes if state.synced.is_set() else await routes_of(ctx)
    route = routes.by_name.get(found.name)
    if route is None:
        peer = routes.peers.get(found.name)
        if peer is None:
            raise model_not_found(found.name)
        return await serve_peer(request, ctx, peer, request.raw_path, found=found)
    return await serve_local(
        request, ctx, ctx.state.runtimes[route.id], request.raw_path, body=local_body(found, route)
    )


def model_not_found(name: str) -> ProxyError:
    return ProxyError(404, f"model {name} not found")


def local_body(found: RequestModel, route: RouteModel) -> bytes | None:
    """The body to send to a local model: `useModelName` and the JSON filters applied."""
    body = found.body
    if body is not None:
        rename = route.use_model_name
        if found.kind == "json":
            filters = route.filters
            if rename or filters.strip_params or filters.set_params:
                body = filter_json(
                    body, model=rename, strip=filters.strip_params, set_params=filters.set_params
                )
        elif found.kind == "multipart" and rename and found.model_span is not None:
            body = replace_span(body, found.model_span, rename)
    return body
