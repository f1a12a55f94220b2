"""The per-process objects every handler needs, stored on the app under `CTX`: everything a
proxy holds lives here (made by `app.make_app` at start-up), none of it in module globals; and
`Stages`, the stand-ins a benchmark may put in place of some of the pipeline's stages.

Route handlers get it with `request.app[CTX]`; the pipeline is handed it (`pipeline.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import aiohttp
from aiohttp import web

from .admission import Admission
from .mirror.link import DaemonLink
from .mirror.state import ProxyState
from .observe.access_log import AccessLines
from .observe.activity import Recorder
from .observe.log_hub import LogHub
from .observe.stats import Stats
from .routing.body import RequestModel, read_model
from .upstream.forward import HeaderLines, upstream_headers
from .upstream.pool import UpstreamPool
from .upstream.relay import Streams
from .upstream.transport import AiohttpTransport, LeanTransport

R = TypeVar("R", bound=web.BaseRequest)


class Guard(Protocol):
    """The front checks, then `handler` (`app.guard`)."""

    async def __call__(
        self,
        ctx: ProxyContext,
        request: R,
        handler: Callable[[R], Awaitable[web.StreamResponse]],
        *,
        model_route: bool = ...,
    ) -> web.StreamResponse: ...


@dataclass(frozen=True, slots=True)
class Stages:
    """Stand-ins for stages of the pipeline, for measuring what each one costs
    (`benchmarks/harness/pipeline_stages.py`, which `benchmarks/pipeline_cost.py` runs row by row).

    swapd itself never sets one: a field left at its default is swapd's own stage. Each is read
    once, at start-up, into the place that calls it (`ProxyContext`, `dispatch.Dispatch`,
    `observe/access_log.AccessLines`), so a stand-in costs a request nothing, and the hooks are
    typed: a stage renamed or reshaped fails the type check and the benchmark's start, never
    silently."""

    # The front checks of the model routes `dispatch.py` serves (`app.guard`'s signature).
    front: Guard | None = None
    # Finding the model a request names (`routing.body.read_model`).
    read_model: Callable[[web.BaseRequest], Awaitable[RequestModel]] | None = None
    # The header lines that go upstream (`upstream.forward.upstream_headers`).
    upstream_headers: HeaderLines | None = None
    # The whole pipeline of the model routes `dispatch.py` serves (`pipeline.serve_model`).
    model_route: Callable[[ProxyContext, web.BaseRequest], Awaitable[web.StreamResponse]] | None = (
        None
    )
    # Access lines at all, whatever the config's `logLevel` says.
    access_lines: bool = True


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
    stats: Stats = field(default_factory=Stats)
    # What a benchmark puts in place of some stages (`benchmarks/pipeline_stages.py`); swapd's
    # own when not set.
    stages: Stages = field(default_factory=Stages)
    read_model: Callable[[web.BaseRequest], Awaitable[RequestModel]] = field(init=False)
    upstream_headers: HeaderLines = field(init=False)
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
        self.read_model = self.stages.read_model or read_model
        self.upstream_headers = self.stages.upstream_headers or upstream_headers


CTX: web.AppKey[ProxyContext] = web.AppKey("swapd_proxy", ProxyContext)
