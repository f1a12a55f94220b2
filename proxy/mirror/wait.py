"""Waiting for the first routing table: a proxy that starts before the daemon answers holds requests
briefly instead of answering 404 for every model."""

from __future__ import annotations

import asyncio
from typing import Protocol

from ..floor.errors import Unavailable
from .state import ProxyState, Routes

FIRST_TABLE_WAIT_S = 30.0


class _Holder(Protocol):
    """What holds the mirror: the proxy's context."""

    @property
    def state(self) -> ProxyState: ...


async def routes_of(ctx: _Holder) -> Routes:
    state = ctx.state
    if not state.synced.is_set():
        try:
            await asyncio.wait_for(state.synced.wait(), FIRST_TABLE_WAIT_S)
        except TimeoutError as exc:
            raise Unavailable(
                "the swapd daemon has not sent its routing table yet; retry shortly",
            ) from exc
    return state.routes
