"""Selectors' config: each error says where and what, and a spillover's targets must be able to run
together."""

from __future__ import annotations

import pytest

from swapd.daemon.config import ConfigError, load_config_text

MODELS = """
models:
  a: {cmd: "x", proxy: "http://127.0.0.1:9"}
  b: {cmd: "x", proxy: "http://127.0.0.1:9", aliases: [bb]}
peers:
  far: {proxy: "http://127.0.0.1:9", models: [m]}
"""


@pytest.mark.parametrize(
    ("selectors", "message"),
    [
        ("  a: {strategy: pin, targets: [b]}\n", 'selectors.a: name conflicts with model ID "a"'),
        ("  s: {targets: [a]}\n", "selectors.s.strategy is required"),
        ("  s: {strategy: best, targets: [a]}\n",
         'selectors.s.strategy: unknown strategy "best" (valid: warm, pin, spillover)'),
        ("  s: {strategy: pin}\n", "selectors.s.targets must contain at least one entry"),
        ("  s: {strategy: pin, targets: [t]}\n  t: {strategy: pin, targets: [a]}\n",
         'selectors.s.targets[0] references selector "t"; selector chaining is not supported'),
        ("  s: {strategy: pin, targets: [zz]}\n",
         'selectors.s.targets[0] references unknown model "zz"'),
        ("  s: {strategy: warm, targets: [m]}\n",
         'selectors.s.targets[0] must resolve to a local model for strategy "warm"'),
        ("  s: {strategy: spillover, targets: [b, bb]}\n",
         'selectors.s.targets contains duplicate resolved model "b"'),
        ("  s: {strategy: spillover, targets: [a, b]}\n",
         'selectors.s target "a" is not in a routing group'),
        ("  s: {strategy: spillover, targets: [a], settings: {spillover: 0}}\n",
         "selectors.s.settings.spillover must be >= 1"),
    ],
)  # fmt: skip
def test_selector_errors(selectors: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text(MODELS + "selectors:\n" + selectors)
    assert message in str(caught.value)


def test_spillover_targets_must_be_able_to_run_together() -> None:
    spill = "selectors:\n  s: {strategy: spillover, targets: [a, b, far/m]}\n"
    together = load_config_text(MODELS + "groups: {g: {swap: false, members: [a, b]}}\n" + spill)
    assert together.selectors["s"].targets == ("a", "b", "far/m")
    with pytest.raises(ConfigError) as caught:
        load_config_text(MODELS + "groups: {g: {members: [a, b]}}\n" + spill)
    assert "spillover targets must share a group with swap: false" in str(caught.value)
    matrix = "matrix: {sets: {one: a | b}}\n"
    with pytest.raises(ConfigError) as caught:
        load_config_text(MODELS + matrix + spill)
    assert "must all appear together in one expanded matrix set" in str(caught.value)
    assert load_config_text(MODELS + "matrix: {sets: {one: a & b}}\n" + spill).selectors
