"""The one codec for every IPC message: msgpack via msgspec, tagged by class name."""

from __future__ import annotations

import msgspec

from .activity import ActivityRecord
from .messages import Event, Inbound, Reply

_encoder = msgspec.msgpack.Encoder()
_inbound = msgspec.msgpack.Decoder(Inbound)
_reply = msgspec.msgpack.Decoder(Reply)
_event = msgspec.msgpack.Decoder(Event)
_records = msgspec.msgpack.Decoder(tuple[ActivityRecord, ...])

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


def encode_records(records: tuple[ActivityRecord, ...]) -> msgspec.Raw:
    return msgspec.Raw(_encoder.encode(records))


def decode_records(raw: msgspec.Raw) -> tuple[ActivityRecord, ...]:
    return _records.decode(raw)
