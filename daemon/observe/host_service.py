"""The host's figures as the daemon serves them: `QueryPerformance` (`GET /api/performance`) and
`QueryHardware` (`GET /api/hardware`), answered from the performance sampler and the hardware
snapshot, and the sampler's `llamaswap_*` series in the daemon's Prometheus registry (a scrape
asks the sampler first, `before_scrape`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

import msgspec
from prometheus_client.registry import CollectorRegistry

from ...ipc.messages import Document, Error, QueryHardware, QueryPerformance, Reply
from ..config import Config
from ..machinery.gpu_backend import GpuBackend
from . import hardware
from .performance import PerformanceFigures, Sampler, parse_after

log = logging.getLogger("swapd.performance")

_encode = msgspec.json.Encoder().encode
_DISABLED = b'{"enabled":false}'


class Replier(Protocol):
    async def reply(self, identity: bytes, reply: Reply) -> None: ...


class HostService:
    def __init__(
        self, config: Config, backend: GpuBackend, endpoint: Replier, registry: CollectorRegistry
    ) -> None:
        self.backend = backend
        self.endpoint = endpoint
        self.sampler = Sampler(
            backend.telemetry,
            disabled=config.performance_disabled,
            every=config.performance_every,
        )
        registry.register(PerformanceFigures(self.sampler))
        self._hardware: bytes | None = None

    def register(self, on: Any) -> None:
        on(QueryPerformance, self._performance, spawn=True)
        on(QueryHardware, self._hardware_document, spawn=True)

    async def before_scrape(self) -> None:
        await self.sampler.wanted()

    async def _performance(self, identity: bytes, message: QueryPerformance) -> None:
        await self.endpoint.reply(identity, await self.performance(message))

    async def performance(self, message: QueryPerformance) -> Reply:
        if self.sampler.disabled:
            return Document(id=message.id, body=_DISABLED, status=503)
        after = None
        if message.after:
            after = parse_after(message.after)
            if after is None:
                message_text = "invalid 'after' timestamp, use RFC3339 format"
                return Error(id=message.id, status=400, code="bad_request", message=message_text)
        await self.sampler.wanted()
        return Document(id=message.id, body=self.sampler.document(after))

    async def _hardware_document(self, identity: bytes, message: QueryHardware) -> None:
        if self._hardware is None:
            try:
                gpus = await asyncio.to_thread(self.backend.telemetry)
            except Exception as exc:
                log.warning("reading the GPUs for /api/hardware failed: %s", exc)
                gpus = []
            self._hardware = _encode(await asyncio.to_thread(hardware.snapshot, gpus))
        await self.endpoint.reply(identity, Document(id=message.id, body=self._hardware))

    def figures(self) -> dict[str, Any]:
        """For `swapd status` and `/api/status`: what the sampler does and has done."""
        sampler = self.sampler
        return {
            "disabled": sampler.disabled,
            "every": sampler.every,
            "sampling": sampler.running,
            "samples_taken": sampler.taken,
        }

    def reconfigure(self, config: Config) -> None:
        self.sampler.reconfigure(config.performance_disabled, config.performance_every)

    def close(self) -> None:
        self.sampler.stop()
