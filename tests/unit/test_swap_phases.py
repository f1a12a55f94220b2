"""A swap's phases (daemon/policy/swap.py): what each phase holds, and that a transition the
diagram does not have raises instead of leaving a swap in a state no one can read."""

from __future__ import annotations

import asyncio

import pytest

from swapd.daemon.errors import ModelUnloaded
from swapd.daemon.policy.swap import Abort, Claim, IllegalTransition, Phase, Start, Swap, Turn
from swapd.ipc.causes import StopCause
from tests.support.models import model
from tests.support.scheduler import Handle


async def _never() -> Handle | None:
    await asyncio.Event().wait()
    return None


async def test_a_swap_goes_through_its_phases_holding_only_what_each_needs() -> None:
    loop = asyncio.get_running_loop()
    swap: Swap[Handle] = Swap("t", loop.create_future(), Turn(0, 1, 100.0))
    assert swap.phase is Phase.QUEUED and swap.waits is not None and swap.claim is None
    swap.claimed(Claim(frozenset({"a"})))
    assert swap.phase is Phase.CLAIMED and swap.waits is None and swap.holds("a")
    swap.stopping()
    swap.queued(yielded_at=101.0)  # a request took a back
    assert swap.phase is Phase.QUEUED and swap.claim is None
    assert swap.waits is not None and swap.waits.yielded_at == 101.0
    swap.claimed(Claim(frozenset()))
    task = loop.create_task(_never())
    swap.starting(Start(model("t"), task))
    assert swap.phase is Phase.STARTING and swap.start is not None
    swap.restarting()  # a reload changed the definition: its start is cancelled
    assert swap.phase is Phase.RESTARTING and swap.start is None
    await asyncio.wait([task])
    assert task.cancelled()
    swap.queued()
    error = ModelUnloaded("unloaded")
    assert swap.aborted(Abort(error, StopCause.UNLOAD))
    assert swap.phase is Phase.ABORTED and swap.result.exception() is error
    assert not swap.aborted(Abort(ModelUnloaded("again"), StopCause.UNLOAD)), "the first answer"


@pytest.mark.parametrize(
    "step",
    [
        lambda s: s.stopping(),  # nothing claimed
        lambda s: s.restarting(),  # nothing starting
        lambda s: s.queued(),  # queued already
    ],
)
async def test_a_transition_the_diagram_does_not_have_raises(step) -> None:  # type: ignore[no-untyped-def]
    swap: Swap[Handle] = Swap("t", asyncio.get_running_loop().create_future(), Turn(0, 1, 0.0))
    with pytest.raises(IllegalTransition, match="swap to t: QUEUED -> "):
        step(swap)
    assert swap.phase is Phase.QUEUED


async def test_an_aborted_swap_goes_nowhere_else() -> None:
    swap: Swap[Handle] = Swap("t", asyncio.get_running_loop().create_future(), Turn(0, 1, 0.0))
    swap.aborted(Abort(ModelUnloaded("unloaded"), StopCause.UNLOAD))
    with pytest.raises(IllegalTransition):
        swap.claimed(Claim(frozenset()))
    swap.result.exception()  # consumed
