"""The one codec for every IPC message: msgpack via msgspec, tagged by class name."""

from __future__ import annotations

import msgspec

from .messages import Event, Inbound, Reply


def _as_builtin(obj: object) -> object:
    # A str subclass (multidict's `istr`, the header names aiohttp sets) goes as the str it is:
    # a capture's header pairs travel as the proxy holds them, not copied into plain strs first.
    if isinstance(obj, str):
        return str(obj)
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


_encoder = msgspec.msgpack.Encoder(enc_hook=_as_builtin)
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
