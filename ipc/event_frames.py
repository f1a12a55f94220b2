"""`/api/events` frames (llama-swap's): `event:message\\ndata:{"type": T, "data": "<JSON text>"}`
and a blank line, the payload's JSON carried as the envelope's string. Both sides make them: a
proxy for its own events (model states, logs, a new client's snapshot), the daemon for the
activity and in-flight ones it renders once for every proxy (docs/architecture.md)."""

from __future__ import annotations

from typing import Any

import msgspec

_encode = msgspec.json.Encoder().encode


def frame(kind: str, data: Any) -> bytes:
    return json_frame(kind, _encode(data))


def json_frame(kind: str, payload: bytes) -> bytes:
    """The frame of a payload already encoded as JSON (an activity record's): the bytes that
    encoding the whole envelope gives, without building it (`kind` is one of llama-swap's
    names, plain ASCII)."""
    return b'event:message\ndata:{"type":"%s","data":%s}\n\n' % (
        kind.encode(),
        _encode(payload.decode()),
    )
