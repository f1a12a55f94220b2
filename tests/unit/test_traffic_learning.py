"""What swapd learns of the traffic (issue 37 item 6, daemon/observe/traffic.py): sequences of
requests in, successors and returns out; counts decay with the half-life; memory is bounded."""

from __future__ import annotations

import pytest

from swapd.daemon.observe import traffic
from swapd.daemon.observe.traffic import Traffic


def _feed(learner: Traffic, seq: list[tuple[str, float]]) -> None:
    for model, at in seq:
        learner.seen(model, at)


def test_b_follows_a_after_the_median_gap() -> None:
    learner = Traffic()
    _feed(learner, [("a", 0), ("a", 1), ("b", 3), ("a", 10), ("b", 14), ("a", 20), ("b", 21)])
    ranked = learner.followers("a", now=21)
    assert [f.model for f in ranked] == ["b"]
    assert ranked[0].count == pytest.approx(3.0, rel=1e-3)
    assert ranked[0].median_gap == 2.0  # gaps 2, 4, 1
    assert learner.likely_next("a", now=21) is not None
    assert learner.likely_next("a", now=21).model == "b"  # type: ignore[union-attr]
    assert [f.model for f in learner.followers("b", now=21)] == ["a"]


def test_no_likely_next_without_a_habit() -> None:
    learner = Traffic()
    _feed(learner, [("a", 0), ("b", 1)])  # once is no habit
    assert learner.likely_next("a", now=1) is None
    _feed(learner, [("a", 2), ("c", 3), ("a", 4), ("d", 5), ("a", 6), ("b", 7), ("a", 8)])
    _feed(learner, [("e", 9)])
    # b twice of five: the first, not the majority
    assert learner.followers("a", now=9)[0].model == "b"
    assert learner.likely_next("a", now=9) is None


def test_counts_decay_with_the_half_life() -> None:
    learner = Traffic(half_life=100.0)
    _feed(learner, [("a", 0), ("b", 1), ("a", 2), ("b", 3)])
    assert learner.followers("a", now=3)[0].count == pytest.approx(2.0, rel=0.02)
    assert learner.followers("a", now=103)[0].count == pytest.approx(1.0, rel=0.02)
    # Old habits fade below the bar a likely successor needs; a new one takes over.
    assert learner.likely_next("a", now=103) is None
    _feed(learner, [("a", 1000), ("c", 1001), ("a", 1002), ("c", 1003)])
    assert learner.likely_next("a", now=1003).model == "c"  # type: ignore[union-attr]


def test_memory_is_bounded() -> None:
    learner = Traffic()
    at = 0.0
    for i in range(traffic.MAX_MODELS * 3):
        for follower in range(traffic.MAX_FOLLOWERS * 2):
            learner.seen("hub", at)
            learner.seen(f"m{i}-{follower}", at + 0.5)
            at += 1
    assert len(learner.models) <= traffic.MAX_MODELS
    assert all(len(m.follows) <= traffic.MAX_FOLLOWERS for m in learner.models.values())
    assert all(
        len(f.gaps) <= traffic.GAPS_KEPT
        for m in learner.models.values()
        for f in m.follows.values()
    )
    for _ in range(traffic.GAPS_KEPT * 3):
        learner.seen("hub", at)
        at += traffic.PAUSE
    assert len(learner.models["hub"].returns) == traffic.GAPS_KEPT
    # The newest follower is kept, whatever the bound dropped.
    assert "m191-15" in learner.models["hub"].follows


def test_returns_and_the_chance_of_one() -> None:
    learner = Traffic(pause=10.0)
    # a is asked for again after 60-ish seconds, three times; short gaps are no return.
    _feed(learner, [("a", 0), ("a", 2), ("a", 62), ("a", 120), ("a", 185)])
    assert [round(g) for g, _ in learner.returns("a", now=185)] == [60, 58, 65]
    assert learner.back_chance("a", idle=30, within=60, now=185) == pytest.approx(3 / 4, rel=0.01)
    # Unused for longer than it ever was before it came back: hardly any chance.
    assert learner.back_chance("a", idle=100, within=60, now=185) == 0.0
    # Too little learned: no answer.
    assert learner.back_chance("b", idle=1, within=60, now=185) is None
    learner.forget()
    assert learner.back_chance("a", idle=30, within=60, now=185) is None
