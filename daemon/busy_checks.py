"""The busy checks wired (`busyCheck`): the poller (`machinery/busy_poller.py`) feeds each answer
through its rule (`policy/busy_answer.py`) into the board (`policy/busy_board.py`). The daemon's
tick says which models are polled (the ready ones with a check); the TTL and the status read the
board, and the scheduler reads it (and asks for a fresh poll) before its eviction policy decides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

import aiohttp

from ..ipc.model_status import Busy
from ..ipc.states import ModelState
from .config import BusyCheck, Config
from .machinery.busy_poller import BusyProbes, Target
from .machinery.model_process import Running
from .policy import busy_answer
from .policy.busy_board import BusyBoard
from .policy.eviction.contract import BusyReading
from .policy.proxies import ProxyRegistry
from .policy.records import ModelRecord


class BusyChecks:
    def __init__(
        self,
        on_change: Callable[[str], None] | None = None,
        session: Callable[[], aiohttp.ClientSession] | None = None,
    ) -> None:
        self.board = BusyBoard(on_change)
        self.probes = BusyProbes(self._answer, session)

    def _answer(self, model_id: str, check: BusyCheck, body: bytes | None, error: str) -> None:
        reading = busy_answer.failed(error) if body is None else busy_answer.evaluate(check, body)
        self.board.observe(model_id, reading)

    def tick(
        self, records: Iterable[ModelRecord[Running]], config: Config, registry: ProxyRegistry
    ) -> None:
        """Poll the ready models that have a check (and only those); log TTLs held."""
        records = list(records)
        wanted = {}
        for rec in records:
            model = config.models.get(rec.id)
            ready = rec.state == ModelState.READY and rec.handle is not None
            if ready and model and model.busy_check:
                assert rec.handle is not None
                wanted[rec.id] = Target(rec.handle.upstream, model.busy_check)
        for model_id in self.probes.sync(wanted):
            self.board.forget(model_id)
        self.board.note_ttl(records, config, registry)

    def reading(self, model_id: str) -> BusyReading | None:
        """The last reading, as the eviction policies take it (None: no reading yet)."""
        report = self.board.report(model_id)
        if report is None:
            return None
        return BusyReading(report.busy, self.board.words(model_id))

    async def check_now(self, models: Iterable[str]) -> None:
        """One poll of each of `models` now, side by side (a swap is about to stop them)."""
        await asyncio.gather(*(self.probes.check_now(m) for m in models), return_exceptions=True)

    def held(self, model_id: str) -> float:
        return self.board.held(model_id)

    def report(self, model_id: str) -> Busy | None:
        return self.board.report(model_id)

    async def close(self) -> None:
        await self.probes.close()
