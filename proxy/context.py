"""The per-process objects every handler needs, stored on the app under `CTX`: everything a
proxy holds lives here (made by `app.make_app` at start-up), none of it in module globals.

Route handlers get it with `request.app[CTX]`; the pipeline is handed it (`pipeline.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

from .admission import Admission
from .mirror.link import DaemonLink
from .mirror.state import ProxyState
from .observe.access_log import AccessLines
from .observe.activity import Recorder
from .observe.log_hub import LogHub
from .observe.stats import Stats
from .routing.body import RequestModel
from .upstream.forward import HeaderLines
from .upstream.pool import UpstreamPool
from .upstream.relay import Streams
from .upstream.transport import AiohttpTransport, LeanTransport

ModelReader = Callable[[web.BaseRequest], Awaitable[RequestModel]]


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
    # The accounting stage's: the activity recorder, the access lines, the counters.
    recorder: Recorder
    lines: AccessLines
    # The responses streaming now, and their capture tees' budget (the recorder's too).
    streams: Streams
    # Two stages the pipeline calls through the context: finding the model a request names and
    # the header lines that go upstream (`dispatch.Stages`: swapd's own, or a benchmark's).
    read_model: ModelReader
    upstream_headers: HeaderLines
    stats: Stats = field(default_factory=Stats)
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
