"""The sets of model states both sides decide on (see `model_status.ModelState`)."""

from __future__ import annotations

from .model_status import ModelState

# A process exists (or is being made or taken down) for a model in one of these states.
LOADED_STATES: frozenset[ModelState] = frozenset({"starting", "ready", "draining", "stopping"})
# The states in which requests for a model are (or are about to be) served by its process.
SERVING_STATES: frozenset[ModelState] = frozenset({"starting", "ready"})

# The `reason` of a `starting` model whose process runs and is waiting for its health check
# (published once the spawn is done, so a loading stream can tell the two phases apart).
HEALTH_CHECK_REASON = "waiting for the health check"
