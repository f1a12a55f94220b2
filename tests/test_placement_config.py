"""The placement settings in the config: `gpus: auto` (per model and top level), `vram:`."""

from __future__ import annotations

import textwrap

import pytest

from swapd.daemon.config.loader import ConfigError, load_config_text

GIB = 1024**3


def load(text: str):
    return load_config_text(textwrap.dedent(text), "config.yaml")


def test_auto_leaves_gpus_to_each_start_and_reads_the_hint() -> None:
    config = load(
        """
        models:
          a:
            cmd: server --port ${PORT} --devices ${GPUS}
            gpus: auto
            vram: 20GiB
          b:
            cmd: server --port ${PORT}
            gpus: auto
            vram: [40GiB, 40 GiB]
          c:
            cmd: server --port ${PORT}
            vram: 1500MB
        """
    )
    a, b, c = config.models["a"], config.models["b"], config.models["c"]
    assert a.gpus_auto and a.gpus is None and a.vram == (20 * GIB,)
    assert "${GPUS}" in a.cmd[-1]  # filled at each start with the GPUs placement chose
    assert b.vram == (40 * GIB, 40 * GIB)
    assert not c.gpus_auto and c.vram == (1_500_000_000,)


def test_top_level_auto_covers_models_without_gpus_and_outside_groups() -> None:
    config = load(
        """
        gpus: auto
        models:
          free:
            cmd: server --port ${PORT}
          pinned:
            cmd: server --port ${PORT}
            gpus: [1]
          member:
            cmd: server --port ${PORT}
        groups:
          g:
            members: [member]
        """
    )
    assert config.models["free"].gpus_auto
    assert not config.models["pinned"].gpus_auto and config.models["pinned"].gpus == ("1",)
    assert not config.models["member"].gpus_auto and config.models["member"].gpus is None


def test_bad_placement_settings_say_where_and_what() -> None:
    with pytest.raises(ConfigError) as caught:
        load(
            """
            gpus: sometimes
            models:
              a:
                cmd: server --port ${PORT}
                gpus: auto
                vram: 12 potatoes
              b:
                cmd: server --port ${PORT}
                gpus: auto
            groups:
              g:
                members: [b]
            """
        )
    text = str(caught.value)
    assert "config.yaml:2 gpus:" in text and "'sometimes'" in text
    assert "models.a.vram: expected a size such as 24GiB" in text
    assert (
        "models.b.gpus: gpus: auto places a model by memory, but this model is in a group" in text
    )
