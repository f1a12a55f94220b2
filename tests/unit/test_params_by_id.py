"""`setParamsByID`'s config without a stack: names become aliases, macros in names, collisions,
and the capabilities' modalities."""

from __future__ import annotations

import pytest

from swapd.daemon.config import ConfigError, load_config_text

HEADER = """
models:
  gpt:
    cmd: "x"
    proxy: "http://127.0.0.1:9"
"""


def test_names_become_aliases() -> None:
    config = load_config_text(
        HEADER
        + "    filters:\n      setParamsByID:\n        gpt: {a: 1}\n        gpt:high: {b: 2}\n"
    )
    gpt = config.models["gpt"]
    assert gpt.aliases == ("gpt:high",)
    assert config.resolve("gpt:high") is gpt
    assert gpt.filters.set_params_by_id == {"gpt": {"a": 1}, "gpt:high": {"b": 2}}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("  other:\n    cmd: x\n    proxy: http://127.0.0.1:9\n    aliases: [gpt:high]\n",
         "duplicate alias 'gpt:high': already an alias of model 'other'"),
        ("  other:\n    cmd: x\n    proxy: http://127.0.0.1:9\n",
         "setParamsByID key 'other' is the id of model 'other'"),
    ],
)  # fmt: skip
def test_names_may_not_name_another_model(extra: str, expected: str) -> None:
    by_id = "    filters:\n      setParamsByID:\n        gpt:high: {b: 2}\n        other: {c: 1}\n"
    if "aliases" in extra:
        by_id = "    filters:\n      setParamsByID:\n        gpt:high: {b: 2}\n"
    with pytest.raises(ConfigError) as caught:
        load_config_text(HEADER + by_id + extra)
    assert expected in str(caught.value)


def test_macros_in_names_and_names_that_collide() -> None:
    body = '    filters:\n      setParamsByID:\n        "${MODEL_ID}:high": {b: 2}\n'
    assert load_config_text(HEADER + body).models["gpt"].aliases == ("gpt:high",)
    body += '        "gpt:high": {b: 3}\n'
    with pytest.raises(ConfigError) as caught:
        load_config_text(HEADER + body)
    assert 'keys "${MODEL_ID}:high" and "gpt:high" resolve to the same value' in str(caught.value)


def test_capabilities_modalities_are_checked() -> None:
    body = "    capabilities: {in: [text, smell], out: [text]}\n"
    with pytest.raises(ConfigError) as caught:
        load_config_text(HEADER + body)
    assert 'capabilities.in: invalid modality "smell", must be one of: text, audio, image' in str(
        caught.value
    )
    assert load_config_text(HEADER + "    capabilities: {}\n").models["gpt"].capabilities is None
