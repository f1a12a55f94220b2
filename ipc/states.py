"""A model's lifecycle state, and the sets of states both sides decide on.

The daemon owns the state of every model and publishes it (`model_status.ModelStatus.state`); the
proxies keep a copy. Both sides name states only through `ModelState` and decide only through the
sets here, so a state added or renamed is a change in one place that the type checker follows.
"""

from __future__ import annotations

from enum import StrEnum


class ModelState(StrEnum):
    """`stopped -> starting -> ready -> draining -> stopping -> stopped`, plus `failed` (the start
    failed; the next request tries again), and for a model with a sleep setting
    `ready -> draining -> sleeping -> asleep -> waking -> ready`: its process stays up and gives
    its GPU memory back (docs/guides/sleep-and-wake.md). On the wire and in JSON, the value."""

    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    STOPPING = "stopping"
    FAILED = "failed"
    SLEEPING = "sleeping"  # its server is being told to give its GPU memory back
    ASLEEP = "asleep"  # its process runs, holding only what it keeps asleep (its residual)
    WAKING = "waking"  # its server is being told to take its memory back, then health-checked


# A process exists (or is being made or taken down) for a model in one of these states.
LOADED_STATES: frozenset[ModelState] = frozenset(
    {
        ModelState.STARTING,
        ModelState.READY,
        ModelState.DRAINING,
        ModelState.STOPPING,
        ModelState.SLEEPING,
        ModelState.ASLEEP,
        ModelState.WAKING,
    }
)
# The states in which requests for a model are (or are about to be) served by its process.
SERVING_STATES: frozenset[ModelState] = frozenset(
    {ModelState.STARTING, ModelState.READY, ModelState.WAKING}
)
# Its process is being taken down or put to sleep: new requests wait for that, then start or
# wake it again.
LEAVING_STATES: frozenset[ModelState] = frozenset(
    {ModelState.DRAINING, ModelState.STOPPING, ModelState.SLEEPING}
)
# Its process runs without its GPU memory (or is giving it back, or taking it back): a server
# whose sleep keeps serving its page (ComfyUI's) answers what needs no GPU in these states.
DOZING_STATES: frozenset[ModelState] = frozenset(
    {ModelState.SLEEPING, ModelState.ASLEEP, ModelState.WAKING}
)
# A model whose process is up and holds (or is taking or giving back) its GPU memory: loaded in
# the sense a person means (`swapd_model_loaded`, Ollama's `/api/ps`).
AWAKE_STATES: frozenset[ModelState] = LOADED_STATES - {ModelState.ASLEEP}
# Its process is being stopped or is gone: what held on to it (ignored websockets) ends.
ENDING_STATES: frozenset[ModelState] = frozenset(
    {ModelState.STOPPING, ModelState.STOPPED, ModelState.FAILED}
)


class StartStep(StrEnum):
    """Where a `starting` model's start is (`model_status.ModelStatus.starting`), so a loading
    stream tells the two apart without reading the reason's words."""

    SPAWNING = "spawning"  # its process is being spawned (or, found starting, awaited)
    HEALTH_CHECK = "health_check"  # its process runs and waits for its health check
    # It answered its health check; its saved conversation caches are being restored.
    KV_RESTORE = "kv_restore"


# The `reason` of a `starting` model whose process runs and is waiting for its health check
# (published, with `StartStep.HEALTH_CHECK`, once the spawn is done): the words a person reads.
HEALTH_CHECK_REASON = "waiting for the health check"
# The `reason` of a `starting` (or `waking`) model whose saved conversation caches are being
# restored (published with `StartStep.KV_RESTORE`).
KV_RESTORE_REASON = "restoring the conversation's cache"
