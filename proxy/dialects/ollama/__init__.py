"""Ollama's API (`/api/tags`, `/api/chat`, ...), translated to each model's own OpenAI-style routes
(docs/clients.md): `routes.py` registers the handlers; `requests.py` rewrites a request on the way
in, `replies.py` and `streams.py` the model's answer on the way out (`relaying.py` wraps them as
the `Reply` the pipeline's relay carries); `listing.py` answers what is configured and loaded;
`values.py` holds Ollama's names, durations and timestamps.
"""
