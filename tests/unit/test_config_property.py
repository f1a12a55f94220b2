"""Property: whatever YAML the loader gets, it returns a Config or raises ConfigError, nothing else.

Four sources of input: arbitrary text, arbitrary nested values dumped to YAML, configs built from
swapd's own key table with random values (near-valid, so the deep checks run), and small random
edits of real config files (near-valid text).
"""

from __future__ import annotations

from typing import Any

import msgspec
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swapd.daemon.config import Config, shape
from swapd.daemon.config.floor.schema import keys_of
from swapd.daemon.config.loader import ConfigError, load_config_text
from tests.support.paths import CONFIGS

TOP_LEVEL = keys_of(shape.Top)
MODEL = keys_of(shape.Model)
FILTERS = keys_of(shape.ModelFilters)
GROUP = keys_of(shape.Group)
PEER = keys_of(shape.Peer)

ENVIRON = {"HOME": "/home/u", "SWAPD_TEST_API_KEY": "k", "SWAPD_TEST_OPENROUTER_KEY": "o"}
FAST = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


def check(text: str) -> None:
    try:
        config = load_config_text(text, environ=ENVIRON)
    except ConfigError as error:
        assert error.issues, "a ConfigError always names at least one problem"
        unplaced = [str(issue) for issue in error.issues if issue.line is None]
        assert not unplaced, "every problem in a text names its line"
        assert str(error)
        return
    assert isinstance(config, Config)
    msgspec.msgpack.encode(config)  # a loaded config can always travel over IPC


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63 - 1, 2**63, 2**64, -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "${PORT}",
            "${MODEL_ID}",
            "${PID}",
            "${GPUS}",
            "${env.HOME}",
            "${env.NOPE}",
            "${x}",
            "none",
        ]
    ),
)
nested = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
commands = st.sampled_from(
    [
        "srv --port ${PORT}",
        "srv --port 9",
        "srv 'unclosed",
        "|\n  a\n  # c ${PORT}\n",
        "srv ${GPUS} -p ${PORT}",
        "",
        "# only comment",
    ]
)


def near(table: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A mapping of the table's keys (plus a stray one) to plausible or wrong values."""
    keys = st.sampled_from([*table, "stray"])
    return st.dictionaries(keys, st.one_of(nested, commands), max_size=6)


models = st.dictionaries(
    st.sampled_from(["a", "b", "comfyui_auto", "org/m:q4", "1.0", "", "a\x00b", "a\nb"]),
    st.one_of(
        near(MODEL).map(lambda d: {"cmd": "srv --port ${PORT}", **d}),
        st.fixed_dictionaries(
            {"cmd": commands},
            optional={
                "filters": near(FILTERS),
                "gpus": st.lists(st.one_of(st.integers(-1, 3), st.text(max_size=4)), max_size=3),
                "aliases": st.lists(st.sampled_from(["a", "b", "x", "", "p/x"]), max_size=3),
                "macros": st.dictionaries(
                    st.sampled_from(["m", "PORT", "x y"]), nested, max_size=2
                ),
                "env": st.lists(st.sampled_from(["A=1", "bad", "B=${MODEL_ID}"]), max_size=3),
            },
        ),
        nested,
    ),
    max_size=4,
)
configs = st.fixed_dictionaries(
    {"models": models},
    optional={
        "groups": st.dictionaries(st.sampled_from(["g", "h"]), near(GROUP), max_size=2),
        "peers": st.dictionaries(st.sampled_from(["p", "q"]), near(PEER), max_size=2),
        "macros": st.dictionaries(st.sampled_from(["x", "PORT", "y"]), nested, max_size=3),
        "apiKeys": st.lists(st.text(max_size=6), max_size=3),
        "upstream": st.fixed_dictionaries(
            {"ignorePaths": st.lists(st.text(max_size=6), max_size=3)}
        ),
        "hooks": st.just({"on_startup": {"preload": ["a", "zz"]}}),
        "extra": near(TOP_LEVEL),
    },
).map(lambda d: {**d.pop("extra", {}), **d})


@FAST
@given(st.text(max_size=300))
def test_any_text(text: str) -> None:
    check(text)


@FAST
@given(nested)
def test_any_nested_value_dumped_to_yaml(value: Any) -> None:
    check(yaml.safe_dump(value, allow_unicode=True))


@FAST
@given(configs)
def test_near_valid_configs(config: dict[str, Any]) -> None:
    check(yaml.safe_dump(config, allow_unicode=True, sort_keys=False))


REAL = [p.read_text() for p in sorted(CONFIGS.glob("*.yaml"))]
TAGS = ["!custom ", "!!python/object:x ", "!!str ", "!!map ", "!!seq ", "!!set ", "!!binary ", ""]


@FAST
@given(configs, st.lists(st.tuples(st.floats(0, 1), st.sampled_from(TAGS)), max_size=3))
def test_near_valid_configs_with_tags(
    config: dict[str, Any], tags: list[tuple[float, str]]
) -> None:
    text = yaml.safe_dump(config, allow_unicode=True, sort_keys=False)
    for where, tag in tags:
        # A tag goes right after a `: ` (before a value), where YAML allows one.
        spots = [i + 2 for i in range(len(text) - 1) if text[i : i + 2] == ": "]
        if spots:
            at = spots[int(where * (len(spots) - 1))]
            text = text[:at] + tag + text[at:]
    check(text)


@FAST
@given(st.integers(1, 400), st.sampled_from(["[", "{a: ", "- "]))
def test_deep_nesting_is_a_config_error_or_a_config(depth: int, opener: str) -> None:
    if opener == "- ":
        text = "".join(f"{'  ' * i}- \n" for i in range(depth)) + "  " * depth + "x\n"
    else:
        closer = "]" if opener == "[" else "}"
        text = "x-deep: " + opener * depth + "1" + closer * depth + "\n"
    check(text)


@FAST
@given(
    st.sampled_from(REAL),
    st.lists(
        st.tuples(
            st.floats(0, 1), st.sampled_from(["delete", "insert", "replace"]), st.characters()
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_small_edits_of_real_configs(text: str, edits: list[tuple[float, str, str]]) -> None:
    for where, how, char in edits:
        at = int(where * len(text))
        if how == "delete":
            text = text[:at] + text[at + 1 :]
        elif how == "insert":
            text = text[:at] + char + text[at:]
        else:
            text = text[:at] + char + text[at + 1 :]
    check(text)
