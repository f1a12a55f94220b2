"""What the daemon reports about a model (`ModelStatus`): broadcast on every state change, listed
by `Status` and `Snapshot`. Built from what each part knows, handed in; nothing here decides."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Protocol

import msgspec

from ..ipc.model_status import Lingering, LingeringProcess, ModelStatus, SleepStatus, Waiting
from ..ipc.states import ModelState, StartStep
from .config import ModelConfig
from .gpu_ledger import GpuLedger
from .machinery.kv_slots import KvSlots
from .machinery.model_process import Running
from .machinery.sleeping import SleepFacts
from .observe.learning import Learning
from .observe.swap_log import SwapLog
from .policy import ttl
from .policy.busy_board import BusyBoard
from .policy.proxies import ProxyRegistry
from .policy.records import ModelRecord


def model_status(
    rec: ModelRecord[Running],
    model: ModelConfig | None,
    registry: ProxyRegistry,
    lingering: Mapping[str, Lingering],
    gpu_lingering: Mapping[str, tuple[LingeringProcess, ...]],
    now: float | None = None,
    busy: BusyBoard | None = None,
    waiting: Waiting | None = None,
    sleep: Mapping[str, SleepFacts] | None = None,
    estimates: tuple[float | None, float | None] = (None, None),
) -> ModelStatus:
    """`rec` as the world sees it; `model` is its definition in the current config (None when a
    reload removed it); `estimates`: how long its load and its wake take (the swap log's)."""
    handle = rec.handle
    facts = sleep.get(rec.id) if sleep is not None else None
    return ModelStatus(
        model=rec.id,
        state=rec.state,
        upstream=handle.upstream if handle else (model.proxy if model else ""),
        pid=handle.pid if handle else None,
        port=handle.port if handle else (model.port if model else None),
        gpus=handle.gpus if handle else tuple(model.gpus or ()) if model else (),
        ttl=model.ttl if model else 0,
        since=rec.since,
        last_activity=last_activity(rec, registry),
        ttl_left=ttl.ttl_left_of(rec, model, registry, now, busy.held(rec.id) if busy else 0.0),
        keep_alive=registry.kept(rec.id, handle.pid if handle else None),
        reason=rec.reason,
        # Its health check's beginning is told by the machinery (`effects.StatePublisher`).
        starting=StartStep.SPAWNING if rec.state == ModelState.STARTING else None,
        in_flight=registry.in_flight(rec.id),
        gpu_lingering=gpu_lingering.get(rec.id, ()),
        lingering=lingering.get(rec.id),
        busy=busy.report(rec.id) if busy else None,
        waiting=waiting,
        sleep=sleep_status(rec, model, registry, facts, now),
        load_estimate=estimates[0],
        wake_estimate=estimates[1],
    )


def sleep_status(
    rec: ModelRecord[Running],
    model: ModelConfig | None,
    registry: ProxyRegistry,
    facts: SleepFacts | None,
    now: float | None = None,
) -> SleepStatus | None:
    """A model's sleep facts (None without a sleep setting)."""
    setting = rec.asleep_with or (model.sleep if model is not None else None)
    if setting is None:
        return None
    facts = facts or SleepFacts()
    asleep = rec.state == ModelState.ASLEEP
    return SleepStatus(
        preset=setting.preset,
        residual=_copy(facts.residual) if asleep else {},
        held_before=_copy(facts.held_before),
        last_sleep_s=facts.last_sleep_s,
        last_wake_s=facts.last_wake_s,
        sleeps=facts.sleeps,
        wakes=facts.wakes,
        verified=facts.verified,
        stop_after=setting.stop_after,
        stop_left=ttl.stop_left(rec, setting, registry, now) if asleep else None,
        serves_asleep=setting.serves_asleep,
        websockets=registry.websockets(rec.id),
        wake_on=tuple(f"{r.method} {r.path}" for r in setting.wake_on or ()),
        last_failure=facts.last_failure,
    )


def _copy(held: dict[str, int] | None) -> dict[str, int] | None:
    return None if held is None else dict(held)  # None: not measured


def last_activity(rec: ModelRecord[Running], registry: ProxyRegistry) -> float:
    """The last activity of the running instance: none before its process started (a report of
    an earlier instance, or one that reached the daemon late, belongs to that instance)."""
    at = registry.last_activity.get(rec.id, 0.0)
    if rec.handle is not None and at < rec.handle.started_at:
        return 0.0
    return at


def all_status(
    records: Iterable[ModelRecord[Running]],
    models: Mapping[str, ModelConfig],
    registry: ProxyRegistry,
    lingering: Mapping[str, Lingering],
    gpu_lingering: Mapping[str, tuple[LingeringProcess, ...]],
    busy: BusyBoard | None = None,
    swaps: SwapLog | None = None,
    sleep: Mapping[str, SleepFacts] | None = None,
) -> tuple[ModelStatus, ...]:
    now = time.time()
    return tuple(
        model_status(
            rec,
            models.get(rec.id),
            registry,
            lingering,
            gpu_lingering,
            now,
            busy,
            waiting_of(rec.id, swaps, busy),
            sleep,
            swaps.estimates(rec.id) if swaps is not None else (None, None),
        )
        for rec in records
    )


def waiting_of(target: str, swaps: SwapLog | None, busy: BusyBoard | None) -> Waiting | None:
    """What the swap to `target` waits for now (the swap log's), with the busy models that hold
    it and until when at the latest (the busy board's)."""
    now = swaps.waiting_now(target) if swaps is not None else None
    if now is None:
        return None
    on, since, why = now
    holds = busy.holding_for(target) if busy is not None else {}
    until = max(holds.values(), default=0.0)
    if why is not None and not holds:
        until = why.until
    return Waiting(
        reason=on,
        since=since,
        holding=tuple(sorted(holds)),
        until=until,
        cause=why.cause if why is not None else None,
        serving=why.serving if why is not None else (),
    )


class Lingerings(Protocol):
    """What the process machinery reports of models that stopped (machinery/lifecycle.py), and
    of their sleeps."""

    lingering: dict[str, Lingering]
    gpu_lingering: dict[str, tuple[LingeringProcess, ...]]

    @property
    def sleep_facts(self) -> Mapping[str, SleepFacts]: ...


class StatusView:
    """The statuses of the models, from the parts that know them (built once, read at each
    publish, `status` and snapshot)."""

    def __init__(
        self,
        registry: ProxyRegistry,
        machinery: Lingerings,
        busy: BusyBoard,
        ledger: GpuLedger | None,
        swaps: SwapLog,
        learning: Learning | None = None,
        kv: KvSlots | None = None,
    ) -> None:
        self.learning = learning
        self.kv = kv
        self.registry = registry
        self.machinery = machinery
        self.busy = busy
        self.ledger = ledger
        self.swaps = swaps

    def of(self, rec: ModelRecord[Running], model: ModelConfig | None) -> ModelStatus:
        m = self.machinery
        st = model_status(
            rec,
            model,
            self.registry,
            m.lingering,
            m.gpu_lingering,
            busy=self.busy,
            waiting=waiting_of(rec.id, self.swaps, self.busy),
            sleep=m.sleep_facts,
            estimates=self.swaps.estimates(rec.id),
        )
        st = self._learned(st, rec, model)
        st = self._with_kv(st, model)
        return self.ledger.annotate(st, model) if self.ledger is not None else st

    def _with_kv(self, st: ModelStatus, model: ModelConfig | None) -> ModelStatus:
        kv = self.kv.status(model) if self.kv is not None else None
        return st if kv is None else msgspec.structs.replace(st, kv=kv)

    def all(
        self, records: Iterable[ModelRecord[Running]], models: Mapping[str, ModelConfig]
    ) -> tuple[ModelStatus, ...]:
        m = self.machinery
        records = list(records)
        statuses = all_status(
            records,
            models,
            self.registry,
            m.lingering,
            m.gpu_lingering,
            self.busy,
            self.swaps,
            m.sleep_facts,
        )
        statuses = tuple(
            self._learned(st, rec, models.get(rec.id))
            for st, rec in zip(statuses, records, strict=True)
        )
        statuses = tuple(self._with_kv(st, models.get(st.model)) for st in statuses)
        if self.ledger is None:
            return statuses
        return tuple(self.ledger.annotate(st, models.get(st.model)) for st in statuses)

    def _learned(
        self, st: ModelStatus, rec: ModelRecord[Running], model: ModelConfig | None
    ) -> ModelStatus:
        """`st` with what the learning knows of it, its weight files in the page cache, and an
        asleep model's `stop_left` as the learning has it."""
        learning = self.learning
        if learning is None:
            return st
        sleep, idle = st.sleep, None
        if sleep is not None and rec.state == ModelState.ASLEEP and sleep.stop_after > 0:
            now = time.time()
            idle = now - ttl.asleep_since(rec, self.registry)
            setting = rec.asleep_with or (model.sleep if model is not None else None)
            if setting is not None and learning.enabled:
                left = ttl.stop_left(rec, setting, self.registry, now, learning)
                sleep = msgspec.structs.replace(sleep, stop_left=left)
        within = sleep.stop_after if sleep is not None else 0.0
        return msgspec.structs.replace(
            st,
            sleep=sleep,
            learned=learning.learned(rec.id, idle, within),
            page_cache=learning.cached.get(rec.id),
        )
