"""The placement fit (policy/eviction/memory_fit.py): examples, then hypothesis properties."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from swapd.daemon.policy.eviction.memory_fit import (
    GIB,
    Fit,
    Gpu,
    NoFit,
    Request,
    Resident,
    place,
    room,
)

MARGIN = GIB // 2


def gpu(i: int, total: int = 24, foreign: int = 0, holders: tuple[str, ...] = ()) -> Gpu:
    return Gpu(
        id=f"g{i}", index=i, total=total * GIB, foreign=foreign * GIB, foreign_holders=holders
    )


def res(model: str, gib_on: dict[int, int], last: float = 0, **kw: bool) -> Resident:
    return Resident(model, {f"g{i}": n * GIB for i, n in gib_on.items()}, last_use=last, **kw)


def test_two_fit_on_one_gpu_and_nothing_is_evicted() -> None:
    result = place(Request("b", (8 * GIB,)), [res("a", {0: 8})], [gpu(0)], margin=MARGIN)
    assert isinstance(result, Fit)
    assert result.gpus == ("g0",) and result.evict == ()


def test_evicts_only_the_least_recently_used() -> None:
    running = [res("old", {0: 10}, last=1), res("new", {0: 10}, last=5)]
    result = place(Request("c", (10 * GIB,)), running, [gpu(0)], margin=MARGIN)
    assert isinstance(result, Fit) and result.evict == ("old",)
    assert "least recently used" in result.reason


def test_fewest_evictions_beat_least_recently_used() -> None:
    # Evicting the big newer one frees enough alone; the two small old ones would be two.
    running = [res("s1", {0: 4}, last=1), res("s2", {0: 4}, last=2), res("big", {0: 15}, last=9)]
    result = place(Request("t", (14 * GIB,)), running, [gpu(0)], margin=MARGIN)
    assert isinstance(result, Fit) and result.evict == ("big",)


def test_prefers_a_gpu_with_room_over_evicting() -> None:
    running = [res("a", {0: 20}, last=1)]
    result = place(Request("b", (10 * GIB,)), running, [gpu(0), gpu(1)], margin=MARGIN)
    assert isinstance(result, Fit) and result.gpus == ("g1",) and result.evict == ()


def test_tightest_fit_then_previous_gpu() -> None:
    running = [res("a", {0: 12}, last=1)]
    packed = place(Request("b", (8 * GIB,)), running, [gpu(0), gpu(1)], margin=MARGIN)
    assert isinstance(packed, Fit) and packed.gpus == ("g0",)
    back = place(Request("b", (8 * GIB,), prefer=("g1",)), running, [gpu(0), gpu(1)])
    assert isinstance(back, Fit) and back.gpus == ("g1",)


def test_busy_and_persistent_models_are_never_evicted() -> None:
    running = [res("busy", {0: 20}, busy=True), res("pinned", {1: 20}, persistent=True)]
    result = place(Request("t", (10 * GIB,)), running, [gpu(0), gpu(1)], margin=MARGIN)
    assert isinstance(result, NoFit)
    assert result.wait  # once `busy` is idle it can go
    assert "busy model busy" in result.reason and "persistent model pinned" in result.reason
    assert result.needed == 10 * GIB


def test_foreign_memory_counts_and_is_named() -> None:
    result = place(
        Request("t", (10 * GIB,)), [], [gpu(0, foreign=20, holders=("pid 4121 (20.0 GiB)",))]
    )
    assert isinstance(result, NoFit) and not result.wait
    assert "processes swapd does not own 20.0 GiB (pid 4121 (20.0 GiB))" in result.reason
    assert "needs 10.0 GiB" in result.reason


def test_unknown_footprint_clears_every_allowed_gpu() -> None:
    running = [res("a", {0: 2}), res("b", {1: 2}), res("p", {1: 1}, persistent=True)]
    result = place(Request("t", None), running, [gpu(0), gpu(1)])
    assert isinstance(result, Fit)
    assert result.gpus == ("g0", "g1") and result.evict == ("a", "b")
    limited = place(Request("t", None, may_use=("g1",)), running, [gpu(0), gpu(1)])
    assert isinstance(limited, Fit) and limited.gpus == ("g1",) and limited.evict == ("b",)
    waits = place(Request("t", None), [res("a", {0: 2}, busy=True)], [gpu(0)])
    assert isinstance(waits, NoFit) and waits.wait and waits.holders == ("a",)


def test_multi_gpu_footprint_takes_distinct_gpus() -> None:
    result = place(Request("t", (20 * GIB, 20 * GIB)), [], [gpu(0), gpu(1), gpu(2)])
    assert isinstance(result, Fit) and len(set(result.gpus)) == 2
    too_many = place(Request("t", (GIB, GIB, GIB)), [], [gpu(0), gpu(1)])
    assert isinstance(too_many, NoFit) and "needs 3 GPUs" in too_many.reason


# ----------------------------------------------------------------------------- properties

gpus_st = st.lists(
    st.builds(lambda t, f: (t, min(f, t)), st.integers(1, 80), st.integers(0, 20)),
    min_size=1,
    max_size=4,
).map(lambda specs: [gpu(i, t, f) for i, (t, f) in enumerate(specs)])


@st.composite
def scenario(draw: st.DrawFn) -> tuple[Request, list[Resident], list[Gpu]]:
    gpus = draw(gpus_st)
    residents = []
    for n in range(draw(st.integers(0, 6))):
        on = draw(st.lists(st.sampled_from(range(len(gpus))), min_size=1, max_size=2, unique=True))
        residents.append(
            Resident(
                f"m{n}",
                {f"g{i}": draw(st.integers(1, 30)) * GIB // 2 for i in on},
                last_use=draw(st.floats(0, 100)),
                busy=draw(st.booleans()),
                persistent=draw(st.booleans()),
            )
        )
    size = draw(st.integers(1, len(gpus)))
    need = tuple(draw(st.integers(0, 40)) * GIB // 2 for _ in range(size))
    return Request("target", need), residents, gpus


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_never_over_commits_and_never_evicts_busy_or_persistent(case) -> None:
    request, residents, gpus = case
    result = place(request, residents, gpus, margin=MARGIN)
    if isinstance(result, NoFit):
        return
    by_name = {r.model: r for r in residents}
    assert all(not by_name[m].busy and not by_name[m].persistent for m in result.evict)
    assert len(set(result.gpus)) == len(result.gpus) == len(request.need)
    kept = [r for r in residents if r.model not in result.evict]
    on = {g.id: g for g in gpus}
    needs = sorted(request.need, reverse=True)
    rooms = sorted((room(on[i], kept, MARGIN) for i in result.gpus), reverse=True)
    # Every chosen GPU keeps foreign + reservations + the new footprint + margin within its total.
    assert all(r >= n for r, n in zip(rooms, needs, strict=True))


def fits(request: Request, residents: list[Resident], gpus: list[Gpu]) -> bool:
    """Brute force: some set of GPUs holds every per-GPU need beside `residents`."""
    need = sorted(request.need or (), reverse=True)
    for chosen in itertools.combinations(gpus, len(need)):
        rooms = sorted((room(g, residents, MARGIN) for g in chosen), reverse=True)
        if all(r >= n for r, n in zip(rooms, need, strict=True)):
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_evicts_nothing_when_it_fits_as_is(case) -> None:
    request, residents, gpus = case
    result = place(request, residents, gpus, margin=MARGIN)
    if fits(request, residents, gpus):
        assert isinstance(result, Fit) and result.evict == ()
    else:
        assert not isinstance(result, Fit) or result.evict


@settings(max_examples=200, deadline=None)
@given(scenario())
def test_a_fit_exists_whenever_evicting_all_idle_models_would_make_room(case) -> None:
    request, residents, gpus = case
    stay = [r for r in residents if r.busy or r.persistent]
    possible = fits(request, stay, gpus)
    assert isinstance(place(request, residents, gpus, margin=MARGIN), Fit) == possible


@settings(max_examples=200, deadline=None)
@given(scenario(), st.data())
def test_a_model_kept_to_some_gpus_is_placed_as_if_only_those_existed(case, data) -> None:
    # `gpus: {auto: [...]}`: the GPUs outside the list are not candidates, and nothing changes
    # for the ones inside it.
    request, residents, gpus = case
    allowed = data.draw(st.lists(st.sampled_from([g.id for g in gpus]), min_size=1, unique=True))
    limited = Request(request.model, request.need, may_use=tuple(allowed))
    result = place(limited, residents, gpus, margin=MARGIN)
    alone = place(request, residents, [g for g in gpus if g.id in allowed], margin=MARGIN)
    assert type(result) is type(alone)
    if isinstance(result, Fit) and isinstance(alone, Fit):
        assert set(result.gpus) <= set(allowed)
        assert (result.gpus, result.evict) == (alone.gpus, alone.evict)
