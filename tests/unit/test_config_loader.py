"""The loader's defaults and per-key reading (llama-swap's keys, reference §1.2-§1.3)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from swapd.daemon.config import loader
from swapd.daemon.config import model as c
from swapd.daemon.config.loader import ConfigError, load, load_config, load_config_text

MINIMAL = """
models:
  m:
    cmd: srv --port ${PORT}
"""


def load_text(text: str) -> c.Config:
    return load_config_text(textwrap.dedent(text), environ={})


def test_defaults_are_llama_swaps() -> None:
    config = load_text(MINIMAL)
    model = config.models["m"]
    assert config.health_check_timeout == 120
    assert config.start_port == 5800
    assert config.global_ttl == 0
    assert config.log_level == "info"
    assert config.api_keys == ()
    assert config.include_aliases_in_list is False
    assert config.ignore_paths == c.DEFAULT_IGNORE_PATHS
    assert config.groups == {} and config.peers == {} and config.preload == ()
    assert model.cmd == ("srv", "--port", "5800")
    assert model.port == 5800
    assert model.proxy == "http://localhost:5800"
    assert model.check_endpoint == "/health"
    assert model.ttl == 0
    assert model.unload_timeout == 10
    assert model.health_check_timeout == 120
    assert model.concurrency_limit == 10
    assert model.ignore_websockets is False
    assert model.cmd_stop is None
    assert model.forced == ()


def test_empty_and_comment_only_files_are_valid_with_no_models() -> None:
    assert load_text("").models == {}
    assert load_text("# nothing yet\n").models == {}
    assert load_text("models:\n").models == {}


def test_every_model_key_is_read() -> None:
    config = load_text(
        """
        models:
          m:
            cmd: srv --port ${PORT}
            cmdStop: docker stop m
            checkEndpoint: " /ready "
            ttl: 60
            unloadTimeout: 2.5
            aliases: [one, two]
            env:
              - A=1
              - B=x=y
              - A=2
            unlisted: true
            useModelName: upstream-name
            concurrencyLimit: 4
            compat:
              ignoreWebsockets: true
            name: The M
            description: A model
            metadata: {family: qwen, sizes: [1, 2], nested: {x: true}}
            filters:
              stripParams: " top_k ,model, temperature,top_k,, "
              setParams: {temperature: 0.2, model: nope, tools: [a]}
            gpus: [0, "GPU-8f9a1c2e-0000-4000-8000-000000000000", 3]
        """
    )
    model = config.models["m"]
    assert model.cmd_stop == ("docker", "stop", "m")
    assert model.check_endpoint == "/ready"
    assert model.ttl == 60
    assert model.unload_timeout == 2.5
    assert model.aliases == ("one", "two")
    assert model.env == {"A": "2", "B": "x=y"}  # later entries win, as in llama-swap
    assert model.unlisted is True
    assert model.use_model_name == "upstream-name"
    assert model.concurrency_limit == 4
    assert model.ignore_websockets is True
    assert model.name == "The M" and model.description == "A model"
    assert model.metadata == {"family": "qwen", "sizes": [1, 2], "nested": {"x": True}}
    assert model.filters.strip_params == ("temperature", "top_k")
    assert model.filters.set_params == {"temperature": 0.2, "tools": ["a"]}
    assert model.gpus == ("0", "GPU-8f9a1c2e-0000-4000-8000-000000000000", "3")


def test_check_endpoint_none_skips_the_check() -> None:
    config = load_text(MINIMAL.replace("cmd:", "checkEndpoint: none\n    cmd:"))
    assert config.models["m"].check_endpoint is None


@pytest.mark.parametrize(
    ("model_ttl", "global_ttl", "expected"),
    [(None, 0, 0), (None, 300, 300), (-1, 300, 300), (0, 300, 0), (60, 300, 60)],
)
def test_ttl_unset_or_minus_one_means_global(
    model_ttl: int | None, global_ttl: int, expected: int
) -> None:
    ttl_line = "" if model_ttl is None else f"\n    ttl: {model_ttl}"
    config = load_text(f"globalTTL: {global_ttl}\n{MINIMAL.strip()}{ttl_line}\n")
    assert config.models["m"].ttl == expected


@pytest.mark.parametrize(
    ("model_value", "global_value", "expected"),
    [(None, None, 10), (0, None, 10), (0, 30, 30), (5, 30, 5), (None, 7, 7)],
)
def test_unload_timeout_zero_or_unset_means_global(
    model_value: int | None, global_value: int | None, expected: float
) -> None:
    top = "" if global_value is None else f"unloadTimeout: {global_value}\n"
    line = "" if model_value is None else f"\n    unloadTimeout: {model_value}"
    config = load_text(f"{top}{MINIMAL.strip()}{line}\n")
    assert config.models["m"].unload_timeout == expected


def test_concurrency_limit_zero_means_ten() -> None:
    config = load_text(MINIMAL.strip() + "\n    concurrencyLimit: 0\n")
    assert config.models["m"].concurrency_limit == 10


def test_health_check_timeout_below_fifteen_is_raised_and_recorded() -> None:
    loaded = load_text("healthCheckTimeout: 5\n" + MINIMAL)
    assert loaded.health_check_timeout == 15
    assert loaded.models["m"].health_check_timeout == 15
    [forced] = loaded.forced
    assert forced.key == "healthCheckTimeout" and forced.value == 15
    assert "15" in forced.reason
    assert load_text("healthCheckTimeout: 15\n" + MINIMAL).forced == ()


def test_comfyui_auto_gets_the_seed_pages_forced_settings_with_reasons() -> None:
    config = load_text(
        """
        models:
          comfyui_auto:
            cmd: comfy --port ${PORT}
            checkEndpoint: /
            compat:
              ignoreWebsockets: false
            concurrencyLimit: 50
        """
    )
    model = config.models["comfyui_auto"]
    assert model.ignore_websockets is True
    assert model.concurrency_limit == c.COMFYUI_MIN_CONCURRENCY == 999
    reasons = {f.key: f.reason for f in model.forced}
    assert set(reasons) == {"compat.ignoreWebsockets", "concurrencyLimit"}
    assert (
        "does not count toward concurrency, in-flight requests, TTL activity"
        in (reasons["compat.ignoreWebsockets"])
    )
    assert (
        "one open ComfyUI tab makes many parallel asset and API requests"
        in (reasons["concurrencyLimit"])
    )


def test_comfyui_auto_keeps_a_higher_limit_and_records_nothing_it_did_not_change() -> None:
    config = load_text(
        """
        models:
          comfyui_auto:
            cmd: comfy --port ${PORT}
            compat: {ignoreWebsockets: true}
            concurrencyLimit: 5000
        """
    )
    model = config.models["comfyui_auto"]
    assert model.concurrency_limit == 5000
    assert model.forced == ()


def test_other_models_are_not_forced() -> None:
    config = load_text(MINIMAL.replace("  m:", "  comfyui:"))
    assert config.models["comfyui"].ignore_websockets is False
    assert config.models["comfyui"].concurrency_limit == 10


def test_groups_peers_hooks_and_ignore_paths() -> None:
    config = load_text(
        """
        apiKeys: [sk-1, sk-2]
        includeAliasesInList: true
        logLevel: debug
        models:
          a: {cmd: "srv --port ${PORT}", aliases: [alpha]}
          b: {cmd: "srv --port ${PORT}"}
          c: {cmd: "srv --port ${PORT}"}
        groups:
          pair:
            swap: false
            exclusive: false
            members: [a, b]
          solo:
            persistent: true
            members: [c]
        peers:
          remote:
            proxy: https://example.net/api
            apiKey: sk-remote
            models: [x, y, x]
            filters: {stripParams: "seed", setParams: {zdr: true}}
        hooks:
          on_startup:
            preload: [" alpha ", "", c]
        upstream:
          ignorePaths: ['^/ws(/|$)']
        """
    )
    assert config.api_keys == ("sk-1", "sk-2")
    assert config.include_aliases_in_list is True
    assert config.log_level == "debug"
    assert config.groups["pair"] == c.GroupConfig(members=("a", "b"), swap=False, exclusive=False)
    assert config.groups["solo"] == c.GroupConfig(members=("c",), persistent=True)
    peer = config.peers["remote"]
    assert peer.proxy == "https://example.net/api"
    assert peer.api_key == "sk-remote"
    assert peer.models == ("x", "y")
    assert peer.filters == c.Filters(strip_params=("seed",), set_params={"zdr": True})
    assert config.preload == ("a", "c")  # trimmed, blank dropped, alias resolved
    assert config.ignore_paths == ("^/ws(/|$)",)  # a given list replaces the default
    assert config.resolve("alpha") is config.models["a"]


def test_empty_ignore_paths_keeps_the_default() -> None:
    config = load_text(MINIMAL + "upstream:\n  ignorePaths: []\n")
    assert config.ignore_paths == c.DEFAULT_IGNORE_PATHS


def test_alias_written_as_a_mapping_keeps_its_id_with_a_warning() -> None:
    loaded = load_config_text(
        MINIMAL + "    aliases:\n      - id: gpt-4o-mini\n        name: GPT\n", environ={}
    )
    assert loaded.models["m"].aliases == ("gpt-4o-mini",)


def test_unknown_preload_entry_is_dropped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(MINIMAL + "hooks: {on_startup: {preload: [mm]}}\n")
    loaded = load(path, environ={})
    assert loaded.config.preload == ()
    [warning] = loaded.warnings
    assert warning.path == "hooks.on_startup.preload[0]"
    assert "'mm' is not a local model id or alias (did you mean 'm'?)" in warning.message


def test_ignored_llama_swap_keys_load_with_warnings(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "logRequests: true\nperformance: {every: 5s}\n" + MINIMAL + "    timeouts: {connect: 5}\n"
    )
    loaded = load(path, environ={})
    assert [w.path for w in loaded.warnings] == ["logRequests"]
    assert all("accepted but ignored by swapd" in w.message for w in loaded.warnings)
    assert loaded.warnings[0].line == 1


@pytest.mark.parametrize(
    ("text", "value", "to_stdout"),
    [("", "proxy", False), ("logToStdout: none\n", "none", False),
     ("logToStdout: upstream\n", "upstream", True), ("logToStdout: both\n", "both", True)],
)  # fmt: skip
def test_log_to_stdout_takes_llama_swaps_values(
    tmp_path: Path, text: str, value: str, to_stdout: bool
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text + MINIMAL)
    loaded = load(path, environ={})
    assert not loaded.warnings
    assert loaded.config.log_to_stdout == value
    assert loaded.config.models_to_stdout is to_stdout


def test_a_bad_log_to_stdout_names_its_line_and_the_values(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(MINIMAL + "logToStdout: upstreams\n")
    with pytest.raises(ConfigError) as caught:
        load(path, environ={})
    line = MINIMAL.count("\n") + 1
    assert str(caught.value).splitlines()[0] == (
        f"{path}:{line} logToStdout: expected one of proxy, upstream, both, none, got 'upstreams'"
    )


def test_load_config_reads_a_file_and_records_its_source(tmp_path: Path) -> None:
    path = tmp_path / "swapd.yaml"
    path.write_text(MINIMAL)
    config = load_config(path, environ={})
    assert config.source == str(path)
    assert config.models["m"].port == 5800


def test_yaml_anchors_and_merge_keys_are_materialised() -> None:
    config = load_text(
        """
        models:
          a: &base
            cmd: srv --port ${PORT}
            checkEndpoint: /ready
            ttl: 30
          b:
            <<: *base
            ttl: 5
        """
    )
    assert config.models["a"].check_endpoint == config.models["b"].check_endpoint == "/ready"
    assert (config.models["a"].ttl, config.models["b"].ttl) == (30, 5)
    assert (config.models["a"].port, config.models["b"].port) == (5800, 5801)


def test_model_ids_with_slashes_colons_and_dots_stay_text() -> None:
    config = load_text(
        """
        models:
          org/model:q4.1: {cmd: "srv --port ${PORT}"}
          1.0: {cmd: "srv --port ${PORT}"}
        """
    )
    assert set(config.models) == {"org/model:q4.1", "1.0"}


def test_an_aliased_mapping_with_a_merge_key_is_read_the_same_twice() -> None:
    config = load_text(
        """
        models:
          a: &base
            cmd: srv --port ${PORT}
            ttl: 30
          b: &b
            <<: *base
            ttl: 5
          c: *b
        """
    )
    assert [config.models[m].ttl for m in "abc"] == [30, 5, 5]


def test_duplicate_keys_are_an_error_not_a_silent_override() -> None:
    with pytest.raises(ConfigError) as caught:
        load_text(MINIMAL.strip() + "\n    ttl: 1\n    ttl: 2\n")
    assert "config.yaml:5 models.m.ttl: duplicate key 'ttl' (first defined on line 4)" in str(
        caught.value
    )


def test_empty_strings_mean_unset_where_llama_swap_says_so() -> None:
    config = load_text(MINIMAL.strip() + '\n    cmdStop: ""\n    useModelName: ""\n    name: ""\n')
    model = config.models["m"]
    assert model.cmd_stop is None
    assert model.use_model_name is None and model.name is None


def test_top_level_x_keys_hold_anchors_and_are_ignored() -> None:
    loaded = load_config_text(
        textwrap.dedent(
            """
            x-notes: "${not_a_macro} is never looked at"
            x-defaults: &defaults
              checkEndpoint: /ready
              ttl: 30
            models:
              m:
                <<: *defaults
                cmd: srv --port ${PORT}
            """
        ),
        environ={},
    )
    assert loaded.models["m"].check_endpoint == "/ready"
    # Below the top level an `x-` key is not a home for anchors: an unknown key like any other.
    text = "models:\n  m:\n    x-note: 1\n    cmd: srv --port ${PORT}\n"
    [warning] = loader.load_text(text, environ={}).warnings
    assert "models.m.x-note: unknown key 'x-note'" in str(warning)
    with pytest.raises(ConfigError) as caught:
        loader.load_text(text, environ={}, strict=True)
    assert "models.m.x-note: unknown key 'x-note'" in str(caught.value)


def test_unknown_log_level_acts_as_info_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("logLevel: warning\n" + MINIMAL)
    loaded = load(path, environ={})
    assert loaded.config.log_level == "info"
    [warning] = loaded.warnings
    assert warning.path == "logLevel" and "did you mean 'warn'?" in warning.message
