"""`timeouts` of a model or a peer (llama-swap's keys and defaults) into the ipc struct the
proxy's transports read (proxy/upstream/transport.py). Unset keys keep llama-swap's defaults;
a peer's `responseHeader` defaults to 60 s, a model's to none, as in llama-swap."""

from __future__ import annotations

from ....ipc.routing_table import Timeouts
from .. import shape

PEER_RESPONSE_HEADER = 60.0


def timeouts_of(spec: shape.Timeouts | None, *, peer: bool) -> Timeouts:
    base = Timeouts(response_header=PEER_RESPONSE_HEADER) if peer else Timeouts()
    if spec is None:
        return base
    return Timeouts(
        connect=_or(spec.connect, base.connect),
        keepalive=_or(spec.keepalive, base.keepalive),
        response_header=_or(spec.response_header, base.response_header),
        tls_handshake=_or(spec.tls_handshake, base.tls_handshake),
        expect_continue=_or(spec.expect_continue, base.expect_continue),
        idle_conn=_or(spec.idle_conn, base.idle_conn),
    )


def _or(value: float | None, default: float) -> float:
    return default if value is None else float(value)
