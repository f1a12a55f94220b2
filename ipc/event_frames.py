"""`/api/events` frames (llama-swap's): `event:message\\ndata:{"type": T, "data": "<JSON text>"}`
and a blank line, the payload's JSON carried as the envelope's string. Both sides make them: a
proxy for its own events (model states, logs, a new client's snapshot, the `activity` ids), the
daemon for the in-flight ones it renders once for every proxy (docs/architecture.md)."""

from __future__ import annotations

from typing import Any

import msgspec

_encode = msgspec.json.Encoder().encode

# llama-swap's `activity` event: the new record's id only (its UI then reads the activity API).
_ACTIVITY = b'event:message\ndata:{"type":"activity","data":"{\\"id\\":%d}"}\n\n'


def frame(kind: str, data: Any) -> bytes:
    """The bytes that encoding the whole envelope gives, without building it (`kind` is one of
    llama-swap's names, plain ASCII)."""
    return b'event:message\ndata:{"type":"%s","data":%s}\n\n' % (
        kind.encode(),
        _encode(_encode(data).decode()),
    )


def activity_frames(first: int, count: int) -> bytes:
    """The `activity` events of records `first` .. `first + count - 1`, the bytes `frame` gives
    for each `{"id": n}`, made from a template (a busy proxy records thousands a second)."""
    return b"".join([_ACTIVITY % n for n in range(first, first + count)])
