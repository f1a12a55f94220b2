"""The dialects' paths that the front checks must know (`origin_check.py`): Ollama's model
routes, forwarded like `/v1/chat/completions` (a cross-site page may call them, as it may call
the model routes), and llama.cpp's router routes that change what runs (checked like swapd's own
`/api/models/unload`)."""

from __future__ import annotations

OLLAMA_MODEL_ROUTES = frozenset(
    {"/api/chat", "/api/generate", "/api/embed", "/api/embeddings", "/api/show"}
)
ROUTER_CHANGES = frozenset({"/models/load", "/models/unload"})
