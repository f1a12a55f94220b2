"""Ollama's values: model names (`name:tag`, `:latest` implied), durations (`keep_alive`, Go's
duration syntax or seconds), nanosecond figures and RFC 3339 timestamps."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

from ....ipc.durations import MAX_DURATION_S, go_duration
from ...floor.errors import BadRequest
from ...mirror.state import Routes

# The Ollama API version whose shapes swapd answers (`GET /api/version` while `ollamaAPI` is on):
# Ollama's clients compare it with the least version they need.
API_VERSION = "0.12.6"
LATEST = ":latest"
# The longest keep_alive, in seconds: Ollama's is a Go `time.Duration` (Go's duration parser
# refuses a longer one, and a number of seconds past it does not fit its int64 nanoseconds).
MAX_KEEP_ALIVE_S = MAX_DURATION_S
# What `expires_at` says for a model that never unloads by TTL (Ollama's own far future).
FOREVER = "2318-01-01T00:00:00Z"


def known(routes: Routes, name: str) -> bool:
    return bool(
        routes.model(name) is not None
        or routes.peer(name) is not None
        or name in routes.selectors
        or name in routes.pins
    )


def resolve(routes: Routes, name: str) -> str:
    """The name the route decision gets for Ollama's `name`: as given when the config knows it
    (an id, an alias, a peer's model, a selector or a profile's pin), else without a `:latest`
    tag, which Ollama implies. An unknown name stays as it is (the decision answers 404)."""
    if known(routes, name) or not name.endswith(LATEST):
        return name
    bare = name[: -len(LATEST)]
    return bare if known(routes, bare) else name


def listed_name(name: str) -> str:
    """The name `/api/tags` and `/api/ps` show: Ollama's `name:tag`, `:latest` where the name
    has no tag (a `:` in its last `/`-part)."""
    return name if ":" in name.rsplit("/", 1)[-1] else name + LATEST


def keep_alive(value: object) -> float | None:
    """Ollama's `keep_alive` in seconds: a number of seconds, or a Go duration (`"5m"`,
    `"1h30m"`, `"0"`, `"-1m"`); negative means for ever (returned as -1.0). 400 otherwise, and
    400 past `MAX_KEEP_ALIVE_S`, where Ollama's Go duration ends."""
    if isinstance(value, bool) or value is None:
        raise _bad_keep_alive(value)
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _duration(value.strip())
    else:
        raise _bad_keep_alive(value)
    if math.isnan(seconds) or seconds > MAX_KEEP_ALIVE_S:
        raise _bad_keep_alive(value)
    return -1.0 if seconds < 0 else seconds


def _duration(text: str) -> float:
    try:
        return float(text)  # a number of seconds as text: accepted too
    except ValueError:
        pass
    seconds = go_duration(text)
    if seconds is None:
        raise _bad_keep_alive(text)
    return seconds


def _bad_keep_alive(value: object) -> BadRequest:
    return BadRequest(
        f'invalid keep_alive {_shown(value)}: expected seconds or a duration such as "5m", '
        '"1h30m", "0" (unload after this answer) or "-1" (keep loaded), at most '
        f"{MAX_KEEP_ALIVE_S:.0f} seconds (some 292 years)",
    )


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def timestamp(at: float | None = None) -> str:
    """RFC 3339 in UTC with microseconds, as Ollama's `created_at` and `modified_at`."""
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def nanoseconds(seconds: float) -> int:
    """Seconds as Ollama's nanoseconds: 0 to Go's longest duration (a model's `prompt_ms` of
    1e300 is no reason to fail its answer)."""
    nanos = seconds * 1e9
    if math.isnan(nanos):
        return 0
    return max(0, round(nanos)) if nanos < 2**63 else 2**63 - 1
