"""The placement settings in the config: `gpus: auto` (per model and top level), `vram:`."""

from __future__ import annotations

import textwrap

import pytest

from swapd.daemon.config.loader import ConfigError, load_config_text
from swapd.daemon.policy.eviction.memory_fit import DEFAULT_MARGIN

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


def test_vram_margin_is_a_size_with_a_default() -> None:
    base = "models:\n  a:\n    cmd: server --port ${PORT}\n    gpus: auto\n"
    assert load(base).vram_margin == 512 * 1024**2 == DEFAULT_MARGIN
    assert load("vramMargin: 1.5GiB\n" + base).vram_margin == int(1.5 * GIB)
    assert load("vramMargin: 0\n" + base).vram_margin == 0
    with pytest.raises(ConfigError) as caught:
        load("vramMargin: lots\n" + base)
    assert "config.yaml:1 vramMargin: expected a size such as 24GiB" in str(caught.value)
    assert "'lots'" in str(caught.value)


def test_auto_can_be_kept_to_some_gpus() -> None:
    config = load(
        """
        gpus:
          auto: [1, 2]
        models:
          inherits:
            cmd: server --port ${PORT}
          plain:
            cmd: server --port ${PORT}
            gpus: auto
          own:
            cmd: server --port ${PORT}
            gpus: {auto: [0, GPU-ABC]}
          pinned:
            cmd: server --port ${PORT}
            gpus: [3]
        """
    )
    models = config.models
    assert models["inherits"].gpus_auto and models["inherits"].gpus_allowed == ("1", "2")
    assert models["plain"].gpus_auto and models["plain"].gpus_allowed == ("1", "2")
    assert models["own"].gpus_auto and models["own"].gpus_allowed == ("0", "GPU-ABC")
    assert models["own"].gpus is None  # chosen at each start, among the allowed ones
    assert not models["pinned"].gpus_auto and models["pinned"].gpus_allowed is None
    plain = load("models:\n  a:\n    cmd: server --port ${PORT}\n    gpus: auto\n")
    assert plain.models["a"].gpus_allowed is None  # every GPU


@pytest.mark.parametrize(
    ("value", "line", "where", "expected"),
    [
        ("{auto: 1}", 4, "models.a.gpus.auto", "expected a list of GPU indices or UUIDs"),
        ("{auto: []}", 4, "models.a.gpus.auto", "lists no GPU"),
        ("{any: [0]}", 4, "models.a.gpus", "expected auto, or auto: [GPU indices or UUIDs]"),
        ("{auto: [0, 0]}", 4, "models.a.gpus.auto[1]", "GPU 0 is listed twice"),
        ("{auto: [-1]}", 4, "models.a.gpus.auto[0]", "expected a GPU index (0, 1, ...) or UUID"),
    ],
)
def test_a_bad_gpu_list_for_auto_names_file_line_and_key(
    value: str, line: int, where: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(f"models:\n  a:\n    cmd: server --port ${{PORT}}\n    gpus: {value}\n")
    assert f"config.yaml:{line} {where}: {expected}" in str(caught.value)
