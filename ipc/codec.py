"""The one codec for every IPC message: msgpack via msgspec, tagged by class name."""

from __future__ import annotations

import msgspec

from .activity import ActivityRecord
from .messages import Event, Inbound, Reply

_encoder = msgspec.msgpack.Encoder()
_inbound = msgspec.msgpack.Decoder(Inbound)
_reply = msgspec.msgpack.Decoder(Reply)
_event = msgspec.msgpack.Decoder(Event)
_json_encode = msgspec.json.Encoder().encode

DecodeError = msgspec.DecodeError  # also raised for a valid msgpack of the wrong shape


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def decode_inbound(data: bytes) -> Inbound:
    """What the daemon's ROUTER receives: a request or a cast. Raises `DecodeError`."""
    return _inbound.decode(data)


def decode_reply(data: bytes) -> Reply:
    return _reply.decode(data)


def decode_event(data: bytes) -> Event:
    return _event.decode(data)


def encode_records(records: tuple[ActivityRecord, ...]) -> tuple[bytes, ...]:
    """Each record's JSON (`ActivityAdded.records`)."""
    return tuple(map(_json_encode, records))
