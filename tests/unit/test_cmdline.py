"""cmd / cmdStop text to argv (daemon/cmdline.py), and how YAML block styles reach it."""

from __future__ import annotations

from pathlib import Path

import pytest

from swapd.daemon.config.floor.cmdline import join_continuations, split_command, strip_comment_lines
from swapd.daemon.config.loader import load, load_config_text


def test_llama_swap_sanitize_example_gives_its_twelve_tokens() -> None:
    # llama-swap's tested example (reference §1.4): continuations, comments and both quote styles.
    text = (
        "python model1.py \\\n"
        '  -a "double quotes" \\\n'
        "  # a comment line\n"
        "  --arg2 'single quotes'\n"
        "  -s\n"
        "  # --arg3 999\n"
        "  --arg3 123 \\\n"
        "  --arg4 '\"string in string\"'\n"
        "  -c \"'single quoted'\"\n"
    )
    argv = split_command(strip_comment_lines(text))
    assert argv == [
        "python",
        "model1.py",
        "-a",
        "double quotes",
        "--arg2",
        "single quotes",
        "-s",
        "--arg3",
        "123",
        "--arg4",
        '"string in string"',
        "-c",
        "'single quoted'",
    ]
    assert len(argv[1:]) == 12


def test_comment_lines_are_whole_lines_only() -> None:
    assert strip_comment_lines("a\n  # gone\nb # kept\n#gone too") == "a\nb # kept"


def test_backslash_newline_joins_words_with_a_blank() -> None:
    assert join_continuations("a \\\nb") == "a  \nb"
    assert split_command("run \\\n--flag \\\n value") == ["run", "--flag", "value"]


def test_hash_inside_a_line_is_an_argument_not_a_comment() -> None:
    assert split_command("echo # not a comment") == ["echo", "#", "not", "a", "comment"]


def test_no_shell_expansion_happens() -> None:
    assert split_command("echo $HOME *.txt a|b") == ["echo", "$HOME", "*.txt", "a|b"]


def test_open_quote_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        split_command("echo 'unterminated")


def _cmd(block: str) -> tuple[str, ...]:
    config = load_config_text(f"models:\n  m:\n    proxy: http://127.0.0.1:9\n    cmd: {block}")
    return config.models["m"].cmd


def test_literal_block_drops_comment_lines() -> None:
    assert _cmd("|\n      server\n      # --verbose\n      --port 9\n") == ("server", "--port", "9")


def test_hash_line_in_a_folded_block_is_an_argument() -> None:
    # The seed page: "cmd is a folded YAML scalar, so a # line inside it is an argument".
    assert _cmd(">\n      server\n      # --verbose\n      --port 9\n") == (
        "server",
        "#",
        "--verbose",
        "--port",
        "9",
    )


def test_backslash_continuations_work_in_folded_and_literal_blocks() -> None:
    expected = ("server", "--a", "1", "--b", "2")
    assert _cmd("|\n      server \\\n        --a 1 \\\n        --b 2\n") == expected
    # Folding alone would leave "\ " (an escaped blank) in the text; the loader unfolds first.
    assert _cmd(">\n      server \\\n      --a 1 \\\n      --b 2\n") == expected


def test_folded_and_literal_give_the_same_argv_without_comments() -> None:
    body = (
        '\n      docker run --rm\n      --name x -p 9:8188\n      -e CLI_ARGS=""\n      image:tag\n'
    )
    assert _cmd(">" + body) == _cmd("|" + body)
    assert _cmd(">" + body) == (
        "docker",
        "run",
        "--rm",
        "--name",
        "x",
        "-p",
        "9:8188",
        "-e",
        "CLI_ARGS=",
        "image:tag",
    )


def test_hash_line_in_a_folded_block_gets_a_warning_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "models:\n  m:\n    proxy: http://127.0.0.1:9\n    cmd: >\n      server\n"
        "      # --verbose\n      --port 9\n"
    )
    loaded = load(path, environ={})
    [warning] = loaded.warnings
    assert (warning.line, warning.path) == (6, "models.m.cmd")
    assert "a '#' line in a folded (>) block is passed as arguments" in warning.message
