"""Stand-ins for stages of the pipeline, for measuring what each one costs
(`benchmarks/pipeline_stages.py`, which `benchmarks/pipeline_cost.py` runs row by row).

swapd itself never sets one: a field left at its default is swapd's own stage. Each is read once,
at start-up, into the place that calls it (`context.ProxyContext`, `dispatch.Dispatch`,
`observe/access_log.AccessLines`), so a stand-in costs a request nothing, and the hooks are typed:
a stage renamed or reshaped fails the type check and the benchmark's start, never silently.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from aiohttp import web

if TYPE_CHECKING:
    from .context import ProxyContext
    from .routing.body import RequestModel
    from .upstream.forward import HeaderLines

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
