"""Config edge cases found with a corpus of broken files: each is a clear error (or warning) with
file, line and key path, never a traceback, a hang, or a config that silently means nothing."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swapd.daemon.config import model as c
from swapd.daemon.config.floor.patterns import has_nested_quantifier
from swapd.daemon.config.loader import ConfigError, ConfigIssue, load, load_config_text, load_text
from swapd.daemon.config.sections.model_fields import MAX_COMMAND_LENGTH
from swapd.daemon.routing import routing_table
from swapd.ipc.path_patterns import search_form
from swapd.ipc.routing_table import ModelRouting, RouteModel
from tests.support.cli import swapd


def issues(text: str) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as caught:
        load_config_text(textwrap.dedent(text).lstrip("\n"), environ={})
    return caught.value.issues


def messages(text: str) -> list[str]:
    return [str(issue) for issue in issues(text)]


# -- a long cmd ------------------------------------------------------------------------------


def test_a_two_megabyte_cmd_is_refused_by_check_config_with_its_length(tmp_path: Path) -> None:
    # One quoted word of 2 MB: shlex builds it a character at a time (quadratic, over a minute).
    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  m:\n    cmd: \"srv --port ${{PORT}} '{'x ' * 1_000_000}'\"\n")
    result = swapd("check-config", "-c", str(config))  # gives up after 60 s
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        f"{config}:3 models.m.cmd: is 2000018 characters long, over the limit of "
        f"{MAX_COMMAND_LENGTH} (Linux refuses to start a command with an argument over 128 KiB)"
    )


def test_a_cmd_just_under_the_limit_still_loads() -> None:
    word = "x" * (MAX_COMMAND_LENGTH - 100)
    config = load_config_text(f"models:\n  m:\n    cmd: srv --port ${{PORT}} '{word}'\n")
    assert config.models["m"].cmd[-1] == word


def test_many_unknown_macros_in_a_long_block_each_get_their_own_line() -> None:
    lines = "".join(f"      --x ${{nope{i}}}\n" for i in range(2000))
    found = issues(f"models:\n  m:\n    cmd: |\n      srv --port ${{PORT}}\n{lines}")
    assert len(found) == 2000
    assert str(found[0]) == "config.yaml:5 models.m.cmd: unknown macro '${nope0}'"
    assert str(found[-1]) == "config.yaml:2004 models.m.cmd: unknown macro '${nope1999}'"


def test_macros_that_multiply_are_refused_before_they_take_the_memory() -> None:
    # Each macro uses the one before ten times: ${m11} would be 10^12 characters.
    declared = "".join(f'  m{i}: "{f"${{m{i - 1}}}" * 10}"\n' for i in range(1, 12))
    text = f"macros:\n  m0: xxxxxxxxxx\n{declared}models:\n  a:\n    cmd: srv ${{PORT}} ${{m11}}\n"
    assert messages(text) == [
        "config.yaml:16 models.a.cmd: expanding ${m6} makes this value longer than 1048576 "
        "characters"
    ]


# -- model ids that no request can name ------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ('""', "config.yaml:2 models: a model id cannot be empty"),
        ('" "', "config.yaml:2 models: a model id cannot be empty"),
        (
            '"a\\0b"',
            "config.yaml:2 models: a model id 'a\\x00b' holds the control character U+0000; "
            "no request can name it",
        ),
        (
            '"a\\nb"',
            "config.yaml:2 models: a model id 'a\\nb' holds the control character U+000A; "
            "no request can name it",
        ),
    ],
)
def test_a_model_id_that_cannot_be_requested_is_an_error(written: str, expected: str) -> None:
    found = messages(
        f"""
        models:
          {written}:
            cmd: srv --port ${{PORT}}
          ok:
            cmd: srv --port ${{PORT}}
        """
    )
    assert found == [expected]


def test_an_alias_with_a_newline_is_an_error() -> None:
    assert messages(
        """
        models:
          m:
            cmd: srv --port ${PORT}
            aliases: ["a\\nb"]
        """
    ) == [
        "config.yaml:4 models.m.aliases[0]: an alias 'a\\nb' holds the control character "
        "U+000A; no request can name it"
    ]


# -- YAML the loader cannot read as values ---------------------------------------------------


def test_an_unknown_tag_is_an_error_not_zero_models() -> None:
    assert messages("healthCheckTimeout: 20\nmodels: !custom {}\n") == [
        "config.yaml:2 models: unknown YAML tag '!custom' (swapd reads plain YAML values)"
    ]


def test_an_unknown_tag_on_a_scalar_and_a_python_tag_are_errors() -> None:
    found = messages(
        """
        models:
          m:
            cmd: !env srv --port ${PORT}
            name: !!python/name:os.system x
        """
    )
    assert found == [
        "config.yaml:3 models.m.cmd: unknown YAML tag '!env' (swapd reads plain YAML values)",
        "config.yaml:4 models.m.name: unknown YAML tag '!!python/name:os.system' "
        "(swapd reads plain YAML values)",
    ]


def test_standard_tags_still_load() -> None:
    config = load_config_text(
        "models:\n  m: !!map\n    cmd: !!str srv --port ${PORT}\n    ttl: !!int 5\n"
    )
    assert config.models["m"].ttl == 5


def test_nesting_too_deep_names_the_line_where_it_happens() -> None:
    deep = "".join(f"{'  ' * level}k{level}:\n" for level in range(150))
    with pytest.raises(ConfigError) as caught:
        load_config_text("x-deep:\n" + textwrap.indent(deep, "  "), environ={})
    [issue] = caught.value.issues
    assert issue.message == "YAML document is nested too deeply"
    # k98's line: the root, x-deep's mapping and 98 nested ones, then the key k98 (PyYAML
    # composes keys as nodes too) is the 101st level.
    assert issue.line == 100


def test_a_file_that_is_not_utf8_names_the_byte_and_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"models:\n  m:\n    cmd: srv --name caf\xe9\n")
    with pytest.raises(ConfigError) as caught:
        load(path)
    [issue] = caught.value.issues
    assert str(issue) == (
        f"{path}: cannot read config file: not UTF-8 text (invalid continuation byte at byte "
        "36, line 3)"
    )


def test_a_file_that_never_ends_is_refused_by_its_size() -> None:
    result = swapd("check-config", "-c", "/dev/zero")  # gives up after 60 s
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        "/dev/zero: cannot read config file: larger than 16 MiB"
    )


# -- upstream.ignorePaths ----------------------------------------------------------------------


def test_the_default_pattern_has_no_leading_dot_star() -> None:
    assert not c.DEFAULT_IGNORE_PATHS[0].startswith(".*")


LLAMA_SWAP_DEFAULT = r".*\.(js|json|css|png|gif|jpg|jpeg|ico|txt)$"


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.text(alphabet="/.ajsoncpgtxi\n", max_size=30),
)
def test_the_default_matches_what_llama_swaps_default_matches(path: str) -> None:
    old = re.search(LLAMA_SWAP_DEFAULT, path) is not None
    assert (re.search(c.DEFAULT_IGNORE_PATHS[0], path) is not None) == old
    assert (re.search(search_form(LLAMA_SWAP_DEFAULT), path) is not None) == old


def test_the_routing_table_carries_patterns_without_a_leading_dot_star() -> None:
    config = load_config_text(
        textwrap.dedent(
            r"""
            models:
              m:
                cmd: srv --port ${PORT}
            upstream:
              ignorePaths: ['.*\.(js|css)$', '^/ws(/|$)', '.*?x', '.*+y']
            """
        )
    )
    assert config.ignore_paths[0] == r".*\.(js|css)$"  # the config keeps what was written
    table = routing_table(config, 1)
    assert table.ignore_paths == (r"\.(js|css)$", "^/ws(/|$)", ".*?x", ".*+y")


def test_a_pattern_with_nested_quantifiers_is_a_warning_with_its_line() -> None:
    text = textwrap.dedent(
        """
        models:
          m:
            cmd: srv --port ${PORT}
        upstream:
          ignorePaths:
            - '^/static/'
            - '(a+)+$'
        """
    ).lstrip("\n")
    loaded = load_text_warnings(text)
    assert [str(w) for w in loaded] == [
        "config.yaml:7 upstream.ignorePaths[1]: pattern '(a+)+$' repeats a group that itself "
        "repeats (nested quantifiers, as in (a+)+$): on a path that almost matches it can take "
        "exponential time, and it runs on every /upstream/ request path"
    ]


def load_text_warnings(text: str) -> list[ConfigIssue]:
    return list(load_text(text, environ={}).warnings)


@pytest.mark.parametrize(
    ("pattern", "nested"),
    [
        ("(a+)+$", True),
        (r"(\w+\s?)*$", True),
        ("(a|b+)*", True),
        ("(x{2,3})+", True),
        ("^/api/(v1|v2)/.+$", False),
        ("(?>a+)+", False),  # atomic: never backtracks into the group
        ("(a+)++", False),  # possessive
        ("(a+){2}", False),  # the outer repeat is bounded
        (r"\.(js|css)$", False),
    ],
)
def test_nested_quantifier_detection(pattern: str, nested: bool) -> None:
    assert has_nested_quantifier(pattern) is nested


# -- one declaration of a model's routing fields -----------------------------------------------


def test_the_routing_table_holds_the_configs_own_values() -> None:
    config = load_config_text(
        textwrap.dedent(
            """
            models:
              m:
                cmd: srv --port ${PORT}
                aliases: [a]
                unlisted: true
                useModelName: real
                metadata: {k: [1]}
                filters: {stripParams: "b, a", setParams: {x: 1}}
            peers:
              p:
                proxy: http://127.0.0.1:9
                models: [r]
            """
        )
    )
    table = routing_table(config, 7)
    [route] = table.models
    model = config.models["m"]
    assert isinstance(route, RouteModel)
    for name in ModelRouting.__struct_fields__:
        assert getattr(route, name) == getattr(model, name)
    assert route.upstream == model.proxy == "http://localhost:5800"
    assert route.filters is model.filters  # the same struct, not a copy
    assert table.peers == (config.peers["p"],)


# -- ${PORT} carried over a reload (branch issue10's rule; it lives in stages.allocate_ports) ----


def test_ports_carried_over_are_kept_and_never_given_to_another_model() -> None:
    text = "models:\n" + "".join(f"  {m}:\n    cmd: srv --port ${{PORT}}\n" for m in "acb")
    fresh = load_text(text, environ={}).config
    assert {m: x.port for m, x in fresh.models.items()} == {"a": 5800, "c": 5802, "b": 5801}
    kept = load_text(text, environ={}, ports={"a": 5800, "c": 5801}).config
    assert {m: x.port for m, x in kept.models.items()} == {"a": 5800, "c": 5801, "b": 5802}
