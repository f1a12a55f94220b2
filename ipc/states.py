"""The sets of model states both sides decide on (see `messages.ModelState`)."""

from __future__ import annotations

from .messages import ModelState

# A process exists (or is being made or taken down) for a model in one of these states.
LOADED_STATES: frozenset[ModelState] = frozenset({"starting", "ready", "draining", "stopping"})
# The states in which requests for a model are (or are about to be) served by its process.
SERVING_STATES: frozenset[ModelState] = frozenset({"starting", "ready"})
