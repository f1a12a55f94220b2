"""The dialects' paths that more than one module must know: Ollama's model routes, forwarded
like `/v1/chat/completions` (`ollama/routes.py` registers them)."""

from __future__ import annotations

OLLAMA_MODEL_ROUTES = frozenset(
    {"/api/chat", "/api/generate", "/api/embed", "/api/embeddings", "/api/show"}
)
