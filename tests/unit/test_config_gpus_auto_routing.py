"""`gpus: auto` beside the routers: a model whose neighbours a group (legacy `groups:` or
`routing.router.settings.groups`) or the matrix's sets decide may not also be placed by memory
(a config error at its `gpus` line); the top-level `gpus: auto` skips such models."""

from __future__ import annotations

import textwrap

import pytest

from swapd.daemon.config.loader import ConfigError, load_config_text


def load(text: str):
    return load_config_text(textwrap.dedent(text), "config.yaml")


MODELS = """
models:
  a:
    cmd: server --port ${PORT}
    gpus: auto
  b:
    cmd: server --port ${PORT}
  c:
    cmd: server --port ${PORT}
"""


def test_auto_in_a_routing_group_is_refused_at_its_line() -> None:
    with pytest.raises(ConfigError) as caught:
        load(
            MODELS
            + """
routing:
  router:
    settings:
      groups:
        pair: {swap: false, members: [a, b]}
"""
        )
    assert str(caught.value) == (
        "config.yaml:5 models.a.gpus: gpus: auto places a model by memory, but this model is in "
        "a group, whose rules decide what runs beside it; remove it from the group or list its gpus"
    )


@pytest.mark.parametrize("modern", [False, True])
def test_auto_in_a_matrix_set_is_refused_at_its_line(modern: bool) -> None:
    matrix = """
  vars: {x: a}
  sets:
    duo: "x & b"
"""
    if modern:
        text = MODELS + "routing:\n  router:\n    use: matrix\n    settings:\n      matrix:\n"
        text += textwrap.indent(matrix.strip("\n"), "      ") + "\n"
    else:
        text = MODELS + "matrix:" + matrix
    with pytest.raises(ConfigError) as caught:
        load(text)
    assert str(caught.value) == (
        "config.yaml:5 models.a.gpus: gpus: auto places a model by memory, but this model is in "
        "a set of the matrix, whose sets decide what runs beside it; remove it from the sets or "
        "list its gpus"
    )


def test_top_level_auto_skips_group_members_and_matrix_models() -> None:
    config = load(
        """
        gpus: auto
        models:
          grouped:
            cmd: server --port ${PORT}
          free:
            cmd: server --port ${PORT}
        routing:
          router:
            settings:
              groups:
                g: {members: [grouped]}
        """
    )
    assert not config.models["grouped"].gpus_auto and config.models["free"].gpus_auto
    config = load(
        """
        gpus: auto
        models:
          inset:
            cmd: server --port ${PORT}
          alone:
            cmd: server --port ${PORT}
        matrix:
          sets:
            s: "inset"
        """
    )
    assert not config.models["inset"].gpus_auto and config.models["alone"].gpus_auto
    assert config.router == "matrix"


def test_auto_outside_the_matrix_sets_loads() -> None:
    config = load(MODELS + 'matrix:\n  sets:\n    duo: "b & c"\n')
    assert config.models["a"].gpus_auto and config.router == "matrix"
