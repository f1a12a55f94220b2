"""The per-process objects every handler needs, stored on the app under `CTX`.

Other proxy modules get them with `request.app[CTX]`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

from .admission import Admission
from .mirror.link import DaemonLink
from .mirror.state import ProxyState
from .observe.log_hub import LogHub
from .upstream.pool import UpstreamPool
from .upstream.transport import AiohttpTransport, LeanTransport


@dataclass(slots=True)
class ProxyContext:
    run_dir: Path
    processes: int
    state: ProxyState
    link: DaemonLink
    admission: Admission
    session: aiohttp.ClientSession
    pool: UpstreamPool
    logs: LogHub
    lean: LeanTransport = field(init=False)
    aiohttp: AiohttpTransport = field(init=False)
    # Set on SIGTERM (server.py): new requests get 503 and `Connection: close`.
    closing: bool = False
    # Requests under way, for the shutdown grace; `idle` is set when the last one ends.
    active: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    # The process's one loop, looked up once (each lookup is a call, and a getpid() on 3.11).
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.get_running_loop)

    def enter(self) -> None:
        self.active += 1
        self.idle.clear()

    def leave(self) -> None:
        self.active -= 1
        if self.active == 0:
            self.idle.set()

    def __post_init__(self) -> None:
        self.lean = LeanTransport(self.pool)
        self.aiohttp = AiohttpTransport(self.session)


CTX: web.AppKey[ProxyContext] = web.AppKey("swapd_proxy", ProxyContext)
