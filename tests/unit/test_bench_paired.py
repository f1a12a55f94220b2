"""benchmarks/harness/paired.py, the side-by-side reading `observability_cost` judges its targets
with: the rounds' order rotates, ratios pair each round with the baseline's, and the bootstrap
interval of their median is the same for the same rounds and brackets the median."""

from __future__ import annotations

from types import ModuleType

import pytest

from benchmarks.harness import paired as paired_module


@pytest.fixture(scope="module")
def paired() -> ModuleType:
    return paired_module


def test_every_configuration_goes_first_in_turn(paired: ModuleType) -> None:
    names = ("off", "off again", "on")
    orders = [paired.rotated(names, n) for n in range(4)]
    assert [o[0] for o in orders] == ["off", "off again", "on", "off"]
    assert all(sorted(o) == sorted(names) for o in orders)


def test_ratios_pair_rounds(paired: ModuleType) -> None:
    # A machine that slows down round by round moves both sides: the paired ratio stays 0.9.
    baseline = [1000.0, 800.0, 500.0]
    assert paired.paired([900.0, 720.0, 450.0], baseline) == pytest.approx([0.9, 0.9, 0.9])
    with pytest.raises(ValueError):
        paired.paired([1.0], baseline)


def test_a_ratio_to_both_baselines_takes_their_mean_round_by_round(paired: ModuleType) -> None:
    off, again = [1000.0, 800.0], [800.0, 1000.0]
    assert paired.paired_to_both([855.0, 900.0], off, again) == pytest.approx([0.95, 1.0])
    with pytest.raises(ValueError):
        paired.paired_to_both([1.0, 2.0], off, [1.0])
    with pytest.raises(ValueError):
        paired.paired_to_both([1.0])


def test_the_interval_brackets_the_median_and_is_repeatable(paired: ModuleType) -> None:
    samples = [0.91, 0.97, 1.02, 0.88, 0.95, 1.05, 0.93, 0.99]
    median, low, high = paired.median_interval(samples)
    assert median == pytest.approx(0.96)
    assert low <= median <= high and low >= min(samples) and high <= max(samples)
    assert high - low > 0.02  # eight scattered rounds do not pin the median down
    assert paired.median_interval(samples) == (median, low, high)
    assert paired.median_interval([0.97] * 5) == (0.97, 0.97, 0.97)
    with pytest.raises(ValueError):
        paired.median_interval([])
