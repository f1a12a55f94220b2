"""Why a model was started or stopped: the causes the daemon carries from its scheduler through
its effects to the swap log (`swap_record.SwapRecord.cause`, the `swap` events) and the metrics
(`swapd_model_stops`). The words a person reads (a model's `reason`) are rendered from these,
never the other way round."""

from __future__ import annotations

from enum import StrEnum


class StopCause(StrEnum):
    """Why a model was (or is being) stopped or put to sleep, or why its start was aborted."""

    SWAP = "swap"  # another model needed its room
    UNLOAD = "unload"  # `swapd unload`, the Unload request
    TTL = "ttl"  # its `ttl` passed without a request
    RELOAD = "reload"  # a reload changed or removed its definition
    SHUTDOWN = "shutdown"  # swapd is stopping
    CRASH = "crash"  # its process exited on its own
    UNHEALTHY = "unhealthy"  # found starting after a daemon restart; it never became healthy
    # Put to sleep by `swapd sleep`, `POST /api/models/sleep/<id>`, the UI's Sleep button.
    SLEEP = "sleep"
    # Its sleep failed, timed out, or its GPU memory did not come back: stopped instead.
    SLEEP_FAILED = "sleep_failed"
    # Its wake failed, timed out, or its health check did: stopped, then started cold.
    WAKE_FAILED = "wake_failed"
    # Its wake went well but its `wakeProbe` did not answer as it must: stopped, started cold.
    WAKE_UNVERIFIED = "wake_unverified"
    # Asleep and unused for longer than its `sleep.stopAfter`.
    ASLEEP_TTL = "asleep_ttl"


class StartCause(StrEnum):
    """Why a model was started."""

    REQUEST = "request"  # a request for it (or for a model it was swapped out for)
    # An explicit load: `POST /api/models/load/<id>`, `swapd load`, llama.cpp's
    # `POST /models/load`, Ollama's empty generate.
    LOAD = "load"
    PRELOAD = "preload"  # `hooks.on_startup.preload`
    ADOPTED = "adopted"  # found running or starting after a daemon restart


class WaitCause(StrEnum):
    """Why a queued swap waits (the target's `waiting.cause`): the proxies' loading progress, the
    web UI and `swapd status` word it from this and the models it names, never from prose."""

    # A loaded model's queue is served first (collation; `maxWait` bounds it): `serving` names it.
    COLLATION = "collation"
    # A model's busyCheck says it works (at most its `swapWait`), or it is being read again.
    BUSY = "busy"
    # Behind a swap ahead in the queue (higher priority, past its maxWait, or cheaper to bring in).
    QUEUE = "queue"
    # A model it needs out of the way is still being stopped, or another swap holds it.
    STOPPING = "stopping"
    # Placement by memory: no room on the GPUs yet.
    ROOM = "room"
    # Nobody waits for the swap (loads without `wait`): it takes out no model in use.
    UNWATCHED = "unwatched"
    # A model it takes out was made ready for requests not admitted yet (`DeferCause`).
    ADMITTING = "admitting"


class DeferCause(StrEnum):
    """Why a swap that had its room decided waits before it takes a model out (the swap log's
    `deferred`)."""

    # A model it would take out was made ready for requests whose `Ready` its proxy has not
    # claimed yet: they are served first (docs/swapping.md).
    UNCLAIMED_READY = "unclaimed_ready"
