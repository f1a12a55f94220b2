"""Profiles' pins, read and checked by the config loader (no stack)."""

from __future__ import annotations

import pytest

from swapd.daemon.config import ConfigError, load_config_text

MODELS = """
models:
  a:
    cmd: "x"
    proxy: "http://127.0.0.1:9"
    aliases: [aa]
"""


def test_pins_are_read_and_checked() -> None:
    cfg = load_config_text(MODELS + "profiles:\n  p: {description: d, pins: {chat: aa, a: ~}}\n")
    assert cfg.profiles["p"].pins == {"chat": "aa", "a": ""}
    for extra, message in [
        ("  q: {pins: {x: nope}}\n", 'profiles.q.pins.x references unknown model "nope"'),
        ("  q: {}\n", "profiles.q.pins must contain at least one entry"),
        ("  q: [a]\n", "the legacy list syntax is no longer supported"),
    ]:
        with pytest.raises(ConfigError) as caught:
            load_config_text(MODELS + "profiles:\n" + extra)
        assert message in str(caught.value)
