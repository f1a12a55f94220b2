"""The eviction policies (daemon/policy/eviction/): pure, so tested without processes.

The group cases are llama-swap's internal/router/group_test.go, restated as "what does loading B
stop while A runs"; the gpus cases and the combinations are swapd's own (docs/swapping.md).
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from swapd.daemon.config import Config, GroupConfig
from tests.support.eviction import config, evict_for, group
from tests.support.models import model

# ------------------------------------------------------------------------------------------------
# Default: one model at a time.


def test_default_evicts_everything_else() -> None:
    cfg = config(["a", "b", "c"])
    assert evict_for("a", ["b", "c"], cfg) == {"b", "c"}


def test_default_nothing_running() -> None:
    assert evict_for("a", [], config(["a", "b"])) == frozenset()


def test_target_already_running_is_not_evicted() -> None:
    assert evict_for("a", ["a"], config(["a", "b"])) == frozenset()
    assert evict_for("a", ["a", "b"], config(["a", "b"])) == {"b"}


def test_alias_target_resolves_to_its_id() -> None:
    cfg = Config(models={"a": model("a", aliases=("alpha",)), "b": model("b")})
    assert evict_for("alpha", ["a", "b"], cfg) == {"b"}


def test_unknown_target_raises() -> None:
    with pytest.raises(KeyError, match="unknown model 'nope'"):
        evict_for("nope", ["a"], config(["a"]))


def test_unknown_running_model_is_evicted_like_a_default_member() -> None:
    # A model removed by a reload while it still runs: it held every GPU as far as we know.
    cfg = config({"a": ("0",)})
    assert evict_for("a", ["ghost"], cfg) == {"ghost"}


def test_duplicates_in_running_are_harmless() -> None:
    assert evict_for("a", ["b", "b"], config(["a", "b"])) == {"b"}


# ------------------------------------------------------------------------------------------------
# llama-swap's group_test.go.


def test_swap_group_stops_previous() -> None:  # TestGroup_ServeHTTP_SwapStopsPrevious
    cfg = config(["a", "b"], {"g": group("a", "b")})
    assert evict_for("b", ["a"], cfg) == {"a"}


def test_non_swap_group_keeps_siblings() -> None:  # TestGroup_NonSwapGroup_NoStop
    cfg = config(["a", "b"], {"g": group("a", "b", swap=False, exclusive=False)})
    assert evict_for("b", ["a"], cfg) == frozenset()


def test_cross_group_exclusive_stops_other_group() -> None:  # TestGroup_CrossGroupExclusive
    cfg = config(["a", "b"], {"g1": group("a"), "g2": group("b")})
    assert evict_for("b", ["a"], cfg) == {"a"}


def test_non_exclusive_groups_coexist() -> None:  # TestGroup_CrossGroupNonExclusiveParallel
    cfg = config(["a", "b"], {"g1": group("a", exclusive=False), "g2": group("b", exclusive=False)})
    assert evict_for("a", ["b"], cfg) == frozenset()
    assert evict_for("b", ["a"], cfg) == frozenset()


def test_same_group_swap_even_when_non_exclusive() -> None:  # TestGroup_SameGroupSwapSerialises
    cfg = config(["a", "b"], {"g": group("a", "b", exclusive=False)})
    assert evict_for("b", ["a"], cfg) == {"a"}


def test_persistent_group_not_evicted_by_other_groups() -> None:  # TestGroup_PersistentNotEvicted
    cfg = config(
        ["a", "b"],
        {"persist": group("a", exclusive=False, persistent=True), "other": group("b")},
    )
    assert evict_for("b", ["a"], cfg) == frozenset()


def test_persistent_group_still_swaps_internally() -> None:
    cfg = config(["a", "b"], {"persist": group("a", "b", persistent=True)})
    assert evict_for("b", ["a"], cfg) == {"a"}


def test_non_exclusive_does_not_unload_exclusive() -> (
    None
):  # TestGroup_NonExclusiveDoesNotUnloadExclusive
    cfg = config(["a", "b"], {"g1": group("a"), "g2": group("b", exclusive=False)})
    assert evict_for("b", ["a"], cfg) == frozenset()
    # ... while loading the exclusive one does stop the non-exclusive one.
    assert evict_for("a", ["b"], cfg) == {"b"}


def test_ungrouped_models_form_the_implicit_default_group() -> None:
    cfg = config(["a", "b", "x", "y"], {"g": group("x", "y", swap=False, exclusive=False)})
    # (default) is swap+exclusive: loading a stops b (same group) and x, y (other, not persistent).
    assert evict_for("a", ["b", "x", "y"], cfg) == {"b", "x", "y"}
    # A non-exclusive group leaves (default) running, and its members coexist.
    assert evict_for("x", ["a", "y"], cfg) == frozenset()


def test_persistent_group_survives_the_default_group() -> None:
    cfg = config(["a", "p"], {"keep": group("p", persistent=True)})
    assert evict_for("a", ["p"], cfg) == frozenset()
    # An exclusive persistent group still evicts the default group when it loads.
    assert evict_for("p", ["a"], cfg) == {"a"}


def test_mixed_running_set() -> None:
    cfg = config(
        ["a", "b", "c", "d", "e"],
        {
            "big": group("a", "b"),
            "side": group("c", "d", swap=False, exclusive=False),
            "pin": group("e", persistent=True),
        },
    )
    assert evict_for("a", ["b", "c", "d", "e"], cfg) == {"b", "c", "d"}
    assert evict_for("c", ["a", "d", "e"], cfg) == frozenset()


def test_loader_materialised_default_group_is_the_implicit_one() -> None:
    # llama-swap's loader writes "(default)" into groups; its settings are the implicit ones and
    # the gpus refinement still applies to its members.
    cfg = config(
        {"a": ("0",), "b": ("1",), "c": ("0",)},
        {"(default)": group("a", "b", "c", swap=False, exclusive=False)},
    )
    assert evict_for("a", ["b", "c"], cfg) == {"c"}


# ------------------------------------------------------------------------------------------------
# gpus (no groups): disjoint sets coexist, a model without gpus takes every GPU.


def test_disjoint_gpus_coexist() -> None:
    cfg = config({"a": ("0",), "b": ("1",)})
    assert evict_for("a", ["b"], cfg) == frozenset()
    assert evict_for("b", ["a"], cfg) == frozenset()


def test_overlapping_gpus_evict() -> None:
    cfg = config({"a": ("0", "1"), "b": ("1", "2"), "c": ("3",)})
    assert evict_for("a", ["b", "c"], cfg) == {"b"}


def test_model_without_gpus_takes_every_gpu() -> None:
    cfg = config({"all": None, "a": ("0",), "b": ("1",)})
    assert evict_for("all", ["a", "b"], cfg) == {"a", "b"}
    assert evict_for("a", ["all", "b"], cfg) == {"all"}


def test_empty_gpus_means_no_gpu() -> None:
    cfg = config({"cpu": (), "all": None, "a": ("0",)})
    assert evict_for("cpu", ["all", "a"], cfg) == frozenset()
    assert evict_for("all", ["cpu"], cfg) == frozenset()


def test_index_spelling_is_normalised() -> None:
    cfg = config({"a": ("00",), "b": (" 0",), "c": ("1",)})
    assert evict_for("a", ["b", "c"], cfg) == {"b"}


def test_uuids_compare_case_insensitively() -> None:
    cfg = config({"a": ("GPU-AAA",), "b": ("gpu-aaa",), "c": ("GPU-BBB",)})
    assert evict_for("a", ["b", "c"], cfg) == {"b"}


def test_index_and_uuid_are_assumed_to_overlap_without_a_map() -> None:
    cfg = config({"a": ("0",), "b": ("GPU-BBB",)})
    assert evict_for("a", ["b"], cfg) == {"b"}


def test_empty_canonical_map_resolves_nothing() -> None:
    # No NVML: the daemon passes the map of an empty inventory.
    cfg = config({"a": ("0",), "b": ("GPU-BBB",)})
    assert evict_for("a", ["b"], cfg, canonical_gpus={}) == {"b"}


def test_canonical_map_resolves_index_and_uuid() -> None:
    cfg = config({"a": ("0",), "b": ("GPU-BBB",), "c": ("gpu-aaa",)})
    canonical = {"0": "gpu-aaa", "gpu-aaa": "gpu-aaa", "1": "gpu-bbb", "gpu-bbb": "gpu-bbb"}
    assert evict_for("a", ["b", "c"], cfg, canonical_gpus=canonical) == {"c"}


# ------------------------------------------------------------------------------------------------
# How groups and gpus combine.


def test_gpus_do_not_override_an_explicit_swap_group() -> None:
    cfg = config({"a": ("0",), "b": ("1",)}, {"g": group("a", "b")})
    assert evict_for("b", ["a"], cfg) == {"a"}


def test_gpus_do_not_override_an_explicit_exclusive_group() -> None:
    cfg = config({"a": ("0",), "b": ("1",)}, {"g": group("b")})
    # b's exclusive group stops a (default group), GPUs disjoint or not.
    assert evict_for("b", ["a"], cfg) == {"a"}
    # a (default group) leaves b alone: disjoint GPUs.
    assert evict_for("a", ["b"], cfg) == frozenset()


def test_default_target_still_evicts_overlapping_explicit_group_member() -> None:
    cfg = config({"a": ("0",), "b": ("0",)}, {"g": group("b", swap=False, exclusive=False)})
    assert evict_for("a", ["b"], cfg) == {"b"}


def test_default_target_never_evicts_persistent_even_on_shared_gpu() -> None:
    cfg = config({"a": ("0",), "p": ("0",)}, {"keep": group("p", persistent=True)})
    assert evict_for("a", ["p"], cfg) == frozenset()


def test_non_swap_group_members_share_a_gpu_because_the_operator_said_so() -> None:
    cfg = config({"a": ("0",), "b": ("0",)}, {"g": group("a", "b", swap=False)})
    assert evict_for("b", ["a"], cfg) == frozenset()


# ------------------------------------------------------------------------------------------------
# Properties over random configs.

IDS = ["m0", "m1", "m2", "m3", "m4", "m5"]
gpu_specs = st.one_of(st.none(), st.frozensets(st.sampled_from(["0", "1", "2", "3"]), max_size=3))


@st.composite
def configs(draw: st.DrawFn) -> Config:
    models = {mid: (None if (g := draw(gpu_specs)) is None else tuple(sorted(g))) for mid in IDS}
    shuffled = draw(st.permutations(IDS))
    groups: dict[str, GroupConfig] = {}
    start = 0
    for index in range(draw(st.integers(0, 3))):
        size = draw(st.integers(0, 2))
        members = tuple(shuffled[start : start + size])
        start += size
        if members:
            groups[f"g{index}"] = group(
                *members,
                swap=draw(st.booleans()),
                exclusive=draw(st.booleans()),
                persistent=draw(st.booleans()),
            )
    return config(models, groups)


running_sets = st.frozensets(st.sampled_from([*IDS, "ghost"]))


@given(configs(), st.sampled_from(IDS), running_sets)
def test_result_is_a_subset_of_running_without_target(
    cfg: Config, target: str, running: frozenset[str]
) -> None:
    result = evict_for(target, running, cfg)
    assert target not in result
    assert result <= running


@given(configs(), st.sampled_from(IDS), running_sets)
def test_decisions_are_pairwise(cfg: Config, target: str, running: frozenset[str]) -> None:
    # Each running model is judged on its own: the result is the union of single-model answers.
    pairwise = frozenset().union(*(evict_for(target, [r], cfg) for r in running))
    assert evict_for(target, running, cfg) == pairwise


@given(configs(), st.sampled_from(IDS), running_sets)
def test_without_groups_and_gpus_everything_else_stops(
    cfg: Config, target: str, running: frozenset[str]
) -> None:
    plain = Config(models={mid: model(mid) for mid in cfg.models})
    assert evict_for(target, running, plain) == running - {target}


@given(configs(), st.sampled_from(IDS), st.sampled_from(IDS))
def test_default_group_kept_models_never_share_a_gpu_with_the_target(
    cfg: Config, target: str, other: str
) -> None:
    grouped = {m for g in cfg.groups.values() for m in g.members}
    assume(target not in grouped and other not in grouped and other != target)
    a, b = cfg.models[target].gpus, cfg.models[other].gpus
    kept = other not in evict_for(target, [other], cfg)
    shares = (a is None and b != ()) or (b is None and a != ()) or bool(set(a or ()) & set(b or ()))
    assert kept == (not shares)
    # Symmetric inside the default group.
    assert kept == (target not in evict_for(other, [target], cfg))
