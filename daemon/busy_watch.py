"""The busy check wired (`busyCheck`): the probes (`machinery/busy_probe.py`) feed their answers
through the rule (`policy/busy_rule.py`) into the board (`policy/busy.py`). The supervisor ticks it
with what is ready, the TTL and the status read the board, and the scheduler's swaps ask its
`SwapHold` before they stop a model."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import aiohttp

from ..ipc.model_status import Busy
from .config import Config
from .config.busy_check import BusyCheck
from .machinery.busy_probe import BusyProbes, Target
from .machinery.model_process import Running
from .policy import busy_rule
from .policy.busy import BusyBoard, SwapHold
from .policy.proxies import ProxyRegistry
from .policy.records import ModelRecord


class BusyWatch:
    def __init__(
        self,
        config: Callable[[], Config],
        on_change: Callable[[str], None] | None = None,
        session: Callable[[], aiohttp.ClientSession] | None = None,
    ) -> None:
        self.config = config  # the config in force (a reload replaces it)
        self.board = BusyBoard(on_change)
        self.probes = BusyProbes(self._answer, session)
        self.hold = SwapHold(self.board, self._swap_wait, self.probes.check_now)

    def _answer(self, model_id: str, check: BusyCheck, body: bytes | None, error: str) -> None:
        reading = busy_rule.failed(error) if body is None else busy_rule.evaluate(check, body)
        self.board.observe(model_id, reading)

    def _swap_wait(self, model_id: str) -> float | None:
        model = self.config().models.get(model_id)
        check = model.busy_check if model is not None else None
        return check.swap_wait if check is not None else None

    def tick(
        self, records: Iterable[ModelRecord[Running]], config: Config, registry: ProxyRegistry
    ) -> None:
        """Poll the ready models that have a check (and only those); log TTLs held."""
        records = list(records)
        wanted = {}
        for rec in records:
            model = config.models.get(rec.id)
            if rec.state == "ready" and rec.handle is not None and model and model.busy_check:
                wanted[rec.id] = Target(rec.handle.upstream, model.busy_check)
        for model_id in self.probes.sync(wanted):
            self.board.forget(model_id)
        self.board.note_ttl(records, config, registry)

    def held(self, model_id: str) -> float:
        return self.board.held(model_id)

    def report(self, model_id: str) -> Busy | None:
        return self.board.report(model_id)

    async def close(self) -> None:
        await self.probes.close()
