"""benchmarks/harness/pipeline_stages.py switches stages off through the proxy's own hooks
(`proxy/dispatch.py`'s `Stages`), never by patching names: every switch a row of `pipeline_cost.py`
names is a hook, the hooks reach the places that call them, and swapd's own stages are there when
none is set. (A run of the benchmark shows each row measuring a stage: benchmarks/HISTORY.md.)"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import pytest

from benchmarks import pipeline_cost
from benchmarks.harness import pipeline_stages
from swapd.ipc.routing_table import RoutingTable
from swapd.proxy.admission import Admission
from swapd.proxy.context import ProxyContext
from swapd.proxy.dispatch import Stages
from swapd.proxy.floor.account import TeeBudget
from swapd.proxy.mirror.state import ProxyState
from swapd.proxy.observe.access_log import AccessLines
from swapd.proxy.observe.activity import Recorder
from swapd.proxy.observe.log_hub import LogHub
from swapd.proxy.routing.body import read_model
from swapd.proxy.upstream.forward import upstream_headers
from swapd.proxy.upstream.pool import UpstreamPool
from swapd.proxy.upstream.relay import Streams


@pytest.fixture(scope="module")
def bench() -> tuple[ModuleType, ModuleType]:
    return pipeline_stages, pipeline_cost


class _Link:
    """Stands in for `DaemonLink` (the daemon's DEALER): nothing here talks to a daemon."""

    proxy_id = "p"

    def cast_soon(self, message: object) -> None:
        pass


async def _context(stages: Stages) -> ProxyContext:
    state = ProxyState()
    link: Any = _Link()
    tee = TeeBudget()
    return ProxyContext(
        run_dir=Path("/nonexistent"),
        processes=1,
        state=state,
        link=link,
        admission=Admission(state, link),
        session=aiohttp.ClientSession(),
        pool=UpstreamPool(),
        logs=LogHub(),
        recorder=Recorder("p", None, state, tee),
        lines=AccessLines(enabled=stages.access_lines),
        streams=Streams(tee),
        read_model=stages.read_model,
        upstream_headers=stages.upstream_headers,
    )


def test_every_switch_of_every_row_is_a_hook(bench: tuple[ModuleType, ModuleType]) -> None:
    stages_module, cost = bench
    named = {s for _, row in cost.ROWS for s in row.split(",")} - {"-"}
    assert named <= stages_module.SWITCHES
    every = stages_module.stages_off(set(stages_module.SWITCHES))
    assert every.front is stages_module.no_front
    assert every.read_model is stages_module.given_model
    assert every.upstream_headers is stages_module.floor_headers
    assert every.model_route is stages_module.floor_handler
    assert every.access_lines is False
    assert stages_module.stages_off(set()) == Stages()
    with pytest.raises(ValueError, match="no such stage switch: modle"):
        stages_module.stages_off({"modle"})


async def test_the_context_takes_the_hooks_and_swapds_own_stages_otherwise(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    stages_module, _ = bench
    own = await _context(Stages())
    switched = await _context(stages_module.stages_off({"model", "headers", "access"}))
    try:
        assert own.read_model is read_model and own.upstream_headers is upstream_headers
        assert switched.read_model is stages_module.given_model
        assert switched.upstream_headers is stages_module.floor_headers
        table = RoutingTable(generation=1, log_level="info")
        own.lines.follow(table)
        switched.lines.follow(table)
        assert own.lines.on and not switched.lines.on  # whatever the config says
    finally:
        for ctx in (own, switched):
            await ctx.session.close()
            ctx.pool.close()
