"""Ollama's values: model names (`name:tag`, `:latest` implied), durations (`keep_alive`, Go's
duration syntax or seconds), nanosecond figures and RFC 3339 timestamps."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

from ....ipc.durations import go_duration
from ...floor.errors import BadRequest
from ...mirror.state import Routes

# The Ollama API version whose shapes swapd answers (`GET /api/version` while `ollamaAPI` is on):
# Ollama's clients compare it with the least version they need.
API_VERSION = "0.12.6"
LATEST = ":latest"
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
    `"1h30m"`, `"0"`, `"-1m"`); negative means for ever (returned as -1.0). 400 otherwise."""
    if isinstance(value, bool) or value is None:
        raise _bad_keep_alive(value)
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _duration(value.strip())
    else:
        raise _bad_keep_alive(value)
    if math.isnan(seconds):
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
        f'invalid keep_alive {value!r}: expected seconds or a duration such as "5m", '
        '"1h30m", "0" (unload after this answer) or "-1" (keep loaded)',
    )


def timestamp(at: float | None = None) -> str:
    """RFC 3339 in UTC with microseconds, as Ollama's `created_at` and `modified_at`."""
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def nanoseconds(seconds: float) -> int:
    return max(0, round(seconds * 1e9))
