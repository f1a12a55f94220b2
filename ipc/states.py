"""A model's lifecycle state, and the sets of states both sides decide on.

The daemon owns the state of every model and publishes it (`model_status.ModelStatus.state`); the
proxies keep a copy. Both sides name states only through `ModelState` and decide only through the
sets here, so a state added or renamed is a change in one place that the type checker follows.
"""

from __future__ import annotations

from enum import StrEnum


class ModelState(StrEnum):
    """`stopped -> starting -> ready -> draining -> stopping -> stopped`, plus `failed` (the start
    failed; the next request tries again). On the wire and in JSON, the value."""

    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    STOPPING = "stopping"
    FAILED = "failed"


# A process exists (or is being made or taken down) for a model in one of these states.
LOADED_STATES: frozenset[ModelState] = frozenset(
    {ModelState.STARTING, ModelState.READY, ModelState.DRAINING, ModelState.STOPPING}
)
# The states in which requests for a model are (or are about to be) served by its process.
SERVING_STATES: frozenset[ModelState] = frozenset({ModelState.STARTING, ModelState.READY})
# Its process is being taken down: new requests wait for the stop, then start it again.
LEAVING_STATES: frozenset[ModelState] = frozenset({ModelState.DRAINING, ModelState.STOPPING})
# Its process is being stopped or is gone: what held on to it (ignored websockets) ends.
ENDING_STATES: frozenset[ModelState] = frozenset(
    {ModelState.STOPPING, ModelState.STOPPED, ModelState.FAILED}
)

# The `reason` of a `starting` model whose process runs and is waiting for its health check
# (published once the spawn is done, so a loading stream can tell the two phases apart).
HEALTH_CHECK_REASON = "waiting for the health check"
