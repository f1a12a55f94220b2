"""What the scheduler reads of the world before it decides (its `Readings`): the proxies' reports
of requests in flight, the busy checks, the GPUs' memory (for a placement by memory), and each
model's swap-in cost (the swap log's estimates)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .busy_checks import BusyChecks
from .config import ModelConfig
from .gpu_ledger import GpuLedger
from .policy.eviction.contract import BusyReading, GpuRoom, Occupant
from .policy.proxies import ProxyRegistry
from .policy.records import Activity


class DaemonReadings:
    def __init__(
        self,
        registry: ProxyRegistry,
        busy: BusyChecks,
        ledger: GpuLedger | None,
        estimates: Callable[[str], tuple[float | None, float | None]] | None = None,
    ) -> None:
        self.registry = registry
        self.busy_checks = busy
        self.ledger = ledger
        # The swap log's: a model's load and wake times (medians of its last ones).
        self.estimates = estimates

    def activity(self, model_id: str) -> Activity:
        registry = self.registry
        return Activity(
            in_flight=registry.in_flight(model_id) > 0,
            last=registry.last_activity.get(model_id, 0.0),
        )

    def busy(self, model_id: str) -> BusyReading | None:
        return self.busy_checks.reading(model_id)

    async def check_busy(self, models: frozenset[str]) -> None:
        await self.busy_checks.check_now(models)

    def swap_in_cost(self, model_id: str, *, waking: bool) -> float | None:
        if self.estimates is None:
            return None
        load, wake = self.estimates(model_id)
        return wake if waking and wake is not None else load

    async def gpus(self, target: ModelConfig, occupants: Sequence[Occupant]) -> GpuRoom:
        # Only a policy that places by memory asks, and it is chosen only with a ledger.
        assert self.ledger is not None, "placement by memory without a GPU inventory"
        return await self.ledger.read(target, occupants)
