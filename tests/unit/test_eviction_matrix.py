"""The matrix router without processes: its set language and errors (config/floor/matrix_dsl.py, as
llama-swap's internal/matrix tests), the solver (policy/eviction/matrix_solver.py) on hand-made
cases and against a brute force that expands every set in full, and `gpus` under the matrix
router."""

from __future__ import annotations

import itertools
import math
import textwrap

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from swapd.daemon.config import Config, ConfigError, MatrixConfig, load_config_text
from swapd.daemon.config.floor.matrix_dsl import (
    All,
    AnyOf,
    DslError,
    Expr,
    Leaf,
    Ref,
    compile_sets,
)
from swapd.daemon.policy.eviction.matrix_solver import solve
from tests.support.eviction import evict_for
from tests.support.models import model


def matrix(sets: dict[str, str], costs: dict[str, int] | None = None) -> MatrixConfig:
    known = set("abcdefgh")
    compiled = compile_sets(sets, lambda ident: ident if ident in known else None)
    return MatrixConfig(sets=compiled, evict_costs=costs or {})


# ------------------------------------------------------------------------------- the language


def test_and_binds_tighter_than_or() -> None:
    (only,) = matrix({"s": "a & b | c"}).sets
    assert only.expr == AnyOf((All((Leaf("a"), Leaf("b"))), Leaf("c")))


def test_parentheses_and_references() -> None:
    sets = matrix({"base": "a & (b | c)", "more": "+base & d"}).sets
    assert [s.name for s in sets] == ["base", "more"]
    assert sets[1].expr == All((Ref("base"), Leaf("d")))


def test_a_set_comes_after_the_sets_it_references() -> None:
    assert [s.name for s in matrix({"late": "+early | a", "early": "b"}).sets] == ["early", "late"]


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"s": "a & zz"}, 'set "s": unknown var or model "zz"'),
        ({"s": "+nope"}, 'set "s" references undefined set "nope"'),
        ({"s": "+t", "t": "+s"}, 'circular reference detected involving set "s"'),
        ({"s": "+s"}, 'circular reference detected involving set "s"'),
        ({"s": "(a | b"}, 'set "s": parse: missing closing parenthesis'),
        ({"s": "a &"}, 'set "s": parse: unexpected token ""'),
        ({"s": "a b"}, 'set "s": parse: unexpected token "b" after expression'),
        ({"s": "a ! b"}, "set \"s\": tokenize: unexpected character '!' at position 2"),
        ({"s": "+ a"}, "set \"s\": tokenize: expected set name after '+' at position 1"),
        ({"s": "  "}, 'set "s": empty DSL expression'),
        ({}, "matrix must define at least one set"),
    ],
)
def test_errors_are_llama_swaps(sets: dict[str, str], message: str) -> None:
    with pytest.raises(DslError) as caught:
        matrix(sets)
    assert str(caught.value) == message


# ----------------------------------------------------------------------------------- solving


def test_running_target_evicts_nothing() -> None:
    assert solve("a", {"a", "b"}, matrix({"s": "c"})).evict == frozenset()


def test_target_in_no_set_evicts_everything() -> None:
    assert solve("d", {"a", "b"}, matrix({"s": "a & b"})).evict == {"a", "b"}


def test_cheapest_set_wins() -> None:
    m = matrix({"ab": "a & b", "ac": "a & c"}, costs={"b": 5})
    # a and b run; c would evict b (cost 5) under "ac": nothing cheaper contains c.
    decision = solve("c", {"a", "b"}, m)
    assert (decision.evict, decision.set_name, decision.cost) == ({"b"}, "ac", 5)
    # With b and c running, a fits beside either: it keeps the expensive one.
    decision = solve("a", {"b", "c"}, m)
    assert (decision.evict, decision.set_name, decision.cost) == ({"c"}, "ab", 1)


def test_ties_go_to_the_set_written_first() -> None:
    m = matrix({"first": "a & b", "second": "a & c"})
    decision = solve("a", {"b", "c"}, m)
    assert (decision.evict, decision.set_name) == ({"c"}, "first")


def test_vars_resolve_and_take_precedence() -> None:
    config = load_config_text(
        textwrap.dedent(
            """
            models:
              a: {cmd: "x", proxy: "http://127.0.0.1:9"}
              b: {cmd: "x", proxy: "http://127.0.0.1:9"}
              big: {cmd: "x", proxy: "http://127.0.0.1:9"}
            matrix:
              vars: {b: big, s: a}
              evict_costs: {b: 7}
              sets:
                one: s & b
            """
        )
    )
    assert config.router == "matrix" and config.matrix is not None
    assert config.matrix.evict_costs == {"big": 7}
    assert solve("a", {"big", "b"}, config.matrix).evict == {"b"}


# ------------------------------------------------------------------ brute force, compared


def expand(expr: Expr, sets: dict[str, Expr]) -> list[frozenset[str]]:
    """Every combination the expression allows, written out in full."""
    if isinstance(expr, Leaf):
        return [frozenset({expr.model})]
    if isinstance(expr, Ref):
        return expand(sets[expr.set], sets)
    if isinstance(expr, AnyOf):
        return [combo for item in expr.items for combo in expand(item, sets)]
    assert isinstance(expr, All)
    options = [expand(item, sets) for item in expr.items]
    return [frozenset().union(*combo) for combo in itertools.product(*options)]


def combinations(expr: Expr, sets: dict[str, Expr]) -> int:
    """How many combinations `expand` would write out (to keep the brute force small)."""
    if isinstance(expr, Leaf):
        return 1
    if isinstance(expr, Ref):
        return combinations(sets[expr.set], sets)
    counts = [combinations(item, sets) for item in expr.items]
    if isinstance(expr, AnyOf):
        return sum(counts)
    return math.prod(counts)


def brute(target: str, running: frozenset[str], m: MatrixConfig) -> frozenset[str]:
    if target in running:
        return frozenset()
    exprs = {s.name: s.expr for s in m.sets}
    best: tuple[int, frozenset[str]] | None = None
    for matrix_set in m.sets:
        for combo in expand(matrix_set.expr, exprs):
            if target in combo:
                cost = sum(m.evict_costs.get(r, 1) for r in running - combo)
                if best is None or cost < best[0]:
                    best = (cost, running - combo)
    return running if best is None else best[1]


MODELS = "abcdef"


@st.composite
def dsl(draw: st.DrawFn, depth: int, refs: list[str]) -> str:
    if depth == 0 or draw(st.booleans()):
        if refs and draw(st.integers(0, 4)) == 0:
            return "+" + draw(st.sampled_from(refs))
        return draw(st.sampled_from(MODELS))
    op = draw(st.sampled_from([" & ", " | "]))
    items = draw(st.lists(dsl(depth - 1, refs), min_size=2, max_size=3))
    return "(" + op.join(items) + ")"


@st.composite
def matrices(draw: st.DrawFn) -> MatrixConfig:
    sets: dict[str, str] = {}
    for index in range(draw(st.integers(1, 4))):
        sets[f"s{index}"] = draw(dsl(3, list(sets)))  # references only backwards: no cycles
    costs = draw(st.dictionaries(st.sampled_from(MODELS), st.integers(1, 5), max_size=4))
    compiled = compile_sets(sets, lambda ident: ident if ident in MODELS else None)
    exprs = {c.name: c.expr for c in compiled}
    # References nest: a brute force over millions of combinations would fill the memory.
    assume(sum(combinations(c.expr, exprs) for c in compiled) <= 2000)
    return MatrixConfig(sets=compiled, evict_costs=costs)


@settings(max_examples=300, deadline=None)
@given(matrices(), st.sampled_from(MODELS), st.frozensets(st.sampled_from(MODELS), max_size=5))
def test_solver_matches_brute_force(m: MatrixConfig, target: str, running: frozenset[str]) -> None:
    decision = solve(target, running, m)
    assert decision.evict == brute(target, running, m)
    assert target not in decision.evict and decision.evict <= running


# ------------------------------------------------------------------------- gpus and routers


def test_gpus_refine_a_target_in_no_set() -> None:
    m = matrix({"ab": "a & b"})
    models = {"a": model("a", ("0",)), "b": model("b", ("0",)), "c": model("c", ("1",))}
    cfg = Config(models=models, router="matrix", matrix=m)
    # c is in no set: it would run alone, but a and b are on GPU 0 and c on GPU 1.
    assert evict_for("c", {"a", "b"}, cfg) == frozenset()
    # a is in a set: the matrix's word is exact, c (in no set) is evicted whatever its GPUs.
    assert evict_for("a", {"c"}, cfg) == {"c"}


# ---------------------------------------------------------------------------- config errors


def load_error(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config_text(textwrap.dedent(text))
    return str(caught.value)


MODELS_YAML = """
models:
  a: {cmd: "x", proxy: "http://127.0.0.1:9"}
  b: {cmd: "x", proxy: "http://127.0.0.1:9"}
"""


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "groups: {g: {members: [a]}}\nrouting: {router: {use: group}}\n",
            "config.yaml:5 groups: config uses both the legacy top-level 'matrix'/'groups' keys "
            "and the new 'routing.router' block; please migrate",
        ),
        (
            "groups: {g: {members: [a]}}\nmatrix: {sets: {s: a}}\n",
            "config.yaml:6 matrix: config cannot use both 'groups' and 'matrix'",
        ),
        (
            "routing: {router: {use: matrix}}\n",
            "config.yaml:5 routing.router.use: routing.router.use is 'matrix' but "
            "routing.router.settings.matrix is not set",
        ),
        (
            "routing: {router: {use: round}}\n",
            'config.yaml:5 routing.router.use: routing.router.use: unknown router "round" '
            "(valid: group, matrix)",
        ),
        (
            "routing: {scheduler: {use: lifo}}\n",
            'routing.scheduler.use: unknown scheduler "lifo" (valid: fifo)',
        ),
        (
            "routing: {scheduler: {settings: {fifo: {priority: {zz: 1}}}}}\n",
            'routing.scheduler.settings.fifo.priority references unknown model "zz"',
        ),
        (
            "matrix:\n  sets:\n    s: a & zz\n",
            'config.yaml:7 matrix.sets.s: matrix: set "s": unknown var or model "zz"',
        ),
        (
            "matrix:\n  vars: {v: zz}\n  sets: {s: a}\n",
            'matrix.vars.v: matrix: var key "v" references unknown model "zz"',
        ),
        (
            "matrix:\n  evict_costs: {a: 0}\n  sets: {s: a}\n",
            'matrix: evict_cost for "a" must be a positive integer, got 0',
        ),
    ],
)
def test_refused_combinations(extra: str, expected: str) -> None:
    assert expected in load_error(MODELS_YAML + extra)


def test_both_under_settings_use_picks_one() -> None:
    cfg = load_config_text(
        MODELS_YAML
        + "routing:\n  router:\n    use: matrix\n    settings:\n"
        + "      groups: {g: {members: [a, b], swap: false}}\n      matrix: {sets: {s: a}}\n"
    )
    assert (cfg.router, cfg.groups) == ("matrix", {})
    cfg = load_config_text(
        MODELS_YAML
        + "routing:\n  router:\n    settings:\n"
        + "      groups: {g: {members: [a, b], swap: false}}\n      matrix: {sets: {s: a}}\n"
    )
    assert (cfg.router, cfg.matrix, list(cfg.groups)) == ("group", None, ["g"])
