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
    """The message's bytes. Text that is not Unicode (aiohttp's surrogate escapes for a header's
    bytes that are not UTF-8, which msgpack cannot carry) goes with U+FFFD in its place: one
    client's bad byte never costs a message, such as a batch of other clients' records."""
    try:
        return _encoder.encode(message)
    except UnicodeEncodeError:
        # The same message as plain values (the same bytes on the wire), its text repaired.
        plain = msgspec.to_builtins(message, builtin_types=_BINARY, enc_hook=_as_builtin)
        return _encoder.encode(_repaired(plain))


_BINARY = (bytes, bytearray, memoryview)


def _repaired(value: object) -> object:
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, list | tuple):
        return [_repaired(item) for item in value]
    if isinstance(value, dict):
        return {_repaired(key): _repaired(item) for key, item in value.items()}
    return value


def _text(value: str) -> str:
    try:
        value.encode()
        return value
    except UnicodeEncodeError:
        pass
    try:  # the bytes aiohttp escaped, read again with U+FFFD for each that is not UTF-8
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a lone surrogate of another kind
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def decode_inbound(data: bytes) -> Inbound:
    """What the daemon's ROUTER receives: a request or a cast. Raises `DecodeError`."""
    return _inbound.decode(data)


def decode_reply(data: bytes) -> Reply:
    return _reply.decode(data)


def decode_event(data: bytes) -> Event:
    return _event.decode(data)
