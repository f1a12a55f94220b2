"""Routes dispatched by the request's `model` (OpenAI, Anthropic, llama.cpp, stable-diffusion).

The model comes from a JSON body, a multipart or urlencoded form, or `?model=` (`body.py`); each of
these routes is served by `pipeline.handle_model_route`. (`GET /props`, which llama.cpp's router
answers without a model too, is `dialects/llamacpp_router.py`'s.) The versionless `/v/...` routes
and the audio.cpp `/audioapi/...` routes reach the upstream without their prefix, as in llama-swap
(`/v/chat/completions` is sent as `/chat/completions`, `/audioapi/v1/tasks/run` as `/v1/tasks/run`).
"""

from __future__ import annotations

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
    ("POST", "/audioapi/v1/tasks/run"),
    ("POST", "/v/chat/completions"),
    ("POST", "/v/responses"),
    ("POST", "/v/completions"),
    ("POST", "/v/messages"),
    ("POST", "/v/messages/count_tokens"),
    ("POST", "/v/embeddings"),
    ("POST", "/v/rerank"),
    ("POST", "/v/reranking"),
)

_STRIPPED_PREFIXES = ("/v/", "/audioapi/")
_ROUTE_SET = frozenset(MODEL_ROUTES)


def is_model_route(method: str, path: str) -> bool:
    """Whether `method path` is one of the routes above (llama-swap's in-flight table and
    activity log take `/upstream/<model>/<path>` only when `<path>` is one)."""
    return (method, path) in _ROUTE_SET


def upstream_path(path: str) -> str:
    """The path a model route is sent upstream as (llama-swap's rewrites, applied last)."""
    for prefix in _STRIPPED_PREFIXES:
        if path.startswith(prefix):
            return path[len(prefix) - 1 :]
    return path
