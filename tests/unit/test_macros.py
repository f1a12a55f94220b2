"""Macros: llama-swap's rules (reference §1.5) plus swapd's ${GPUS}, through the real loader."""

from __future__ import annotations

import textwrap

import pytest

from swapd.daemon.config import Config
from swapd.daemon.config.floor import macros
from swapd.daemon.config.loader import ConfigError, load_config_text

ENV = {"HOME": "/home/u", "SWAPD_PORT_BASE": "7000"}


def load(text: str, environ: dict[str, str] | None = None) -> Config:
    return load_config_text(textwrap.dedent(text), environ=ENV if environ is None else environ)


def errors(text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load(text, environ)
    return str(caught.value)


def test_expand_walks_the_list_once_in_reverse_so_only_backward_references_work() -> None:
    scope = [("A", "a"), ("B", "${A}-b")]
    assert macros.expand("x ${B}", scope) == "x a-b"
    forward = [("B", "${A}-b"), ("A", "a")]
    assert macros.expand("x ${B}", forward) == "x ${A}-b"


def test_expand_keeps_the_type_of_an_exact_reference() -> None:
    scope = [("T", 30), ("F", 0.5), ("Y", True)]
    assert macros.expand({"a": "${T}", "b": ["${F}"], "c": "${Y}"}, scope) == {
        "a": 30,
        "b": [0.5],
        "c": True,
    }
    assert macros.expand("t=${T} y=${Y}", scope) == "t=30 y=true"


def test_expand_leaves_map_keys_alone() -> None:
    assert macros.expand({"${A}": "${A}"}, [("A", "v")]) == {"${A}": "v"}


def test_scope_puts_model_id_first_and_overrides_globals_in_place() -> None:
    globals_ = [("A", 1), ("B", 2)]
    assert macros.scope("m", globals_, [("B", 3), ("C", 4)]) == [
        ("MODEL_ID", "m"),
        ("A", 1),
        ("B", 3),
        ("C", 4),
    ]


def test_user_macros_global_and_per_model_with_the_model_winning() -> None:
    config = load(
        """
        macros:
          server: /opt/llama-server
          ctx: 4096
          args: --ctx-size ${ctx}
          name: --name ${MODEL_ID}
        models:
          a:
            cmd: ${server} --port ${PORT} ${args} ${name}
          b:
            macros:
              ctx: 16384
            cmd: ${server} --port ${PORT} ${args}
        """
    )
    assert config.models["a"].cmd == (
        "/opt/llama-server",
        "--port",
        "5800",
        "--ctx-size",
        "4096",
        "--name",
        "a",
    )
    assert config.models["b"].cmd == (
        "/opt/llama-server",
        "--port",
        "5801",
        "--ctx-size",
        "16384",
    )


def test_exact_macro_keeps_its_type_in_typed_fields() -> None:
    config = load(
        """
        macros:
          T: 45
          LIMIT: 3
        models:
          m:
            cmd: srv --port ${PORT}
            ttl: ${T}
            concurrencyLimit: "${LIMIT}"
            metadata:
              port: ${PORT}
              label: "port ${PORT}"
        """
    )
    model = config.models["m"]
    assert model.ttl == 45
    assert model.concurrency_limit == 3
    assert model.metadata == {"port": 5800, "label": "port 5800"}


def test_macros_reach_every_model_field() -> None:
    config = load(
        """
        macros:
          host: 127.0.0.1
          strip: top_k
        models:
          m:
            cmd: srv --listen ${host}:9100
            proxy: http://${host}:9100
            checkEndpoint: /${MODEL_ID}/health
            name: Model ${MODEL_ID}
            description: served on ${host}
            aliases: ["${MODEL_ID}-alias"]
            env: ["WHO=${MODEL_ID}"]
            useModelName: ${MODEL_ID}-upstream
            filters:
              stripParams: "${strip}, top_p"
              setParams:
                note: ${MODEL_ID}
        """
    )
    model = config.models["m"]
    assert model.proxy == "http://127.0.0.1:9100"
    assert model.check_endpoint == "/m/health"
    assert model.name == "Model m"
    assert model.description == "served on 127.0.0.1"
    assert model.aliases == ("m-alias",)
    assert model.env == {"WHO": "m"}
    assert model.use_model_name == "m-upstream"
    assert model.filters.strip_params == ("top_k", "top_p")
    assert model.filters.set_params == {"note": "m"}
    assert model.port is None


def test_global_macros_apply_to_top_level_values() -> None:
    config = load(
        """
        macros:
          base: 6100
          peer: http://10.0.0.2:8080
          key: sk-abc
        startPort: ${base}
        apiKeys: ["${key}"]
        models:
          m:
            cmd: srv --port ${PORT}
        peers:
          p:
            proxy: ${peer}
            models: [remote]
        """
    )
    assert config.start_port == 6100
    assert config.models["m"].port == 6100
    assert config.api_keys == ("sk-abc",)
    assert config.peers["p"].proxy == "http://10.0.0.2:8080"


def test_port_is_allocated_in_sorted_id_order_only_to_models_whose_cmd_uses_it() -> None:
    config = load(
        """
        startPort: 9000
        models:
          zeta:
            cmd: srv --port ${PORT}
          alpha:
            cmd: srv --port ${PORT}
          fixed:
            cmd: srv --port 8000
            proxy: http://127.0.0.1:8000
          mid:
            cmd: srv -p ${PORT}:80
        """
    )
    ports = {mid: m.port for mid, m in config.models.items()}
    assert ports == {"alpha": 9000, "mid": 9001, "zeta": 9002, "fixed": None}
    assert config.models["zeta"].proxy == "http://localhost:9002"
    assert config.models["mid"].cmd == ("srv", "-p", "9001:80")


def test_port_in_a_comment_line_does_not_allocate_a_port() -> None:
    text = """
        models:
          m:
            cmd: |
              srv --port 8000
              # --port ${PORT} ${undefined_macro}
        """
    assert "models.m.proxy: the default proxy http://localhost:${PORT} needs ${PORT} in cmd" in (
        errors(text)
    )


def test_pid_is_kept_literally_in_cmd_stop_only() -> None:
    config = load(
        """
        models:
          m:
            cmd: srv --port ${PORT}
            cmdStop: kill -TERM ${PID}
        """
    )
    assert config.models["m"].cmd_stop == ("kill", "-TERM", "${PID}")
    message = errors(
        """
        models:
          m:
            cmd: srv --port ${PORT} --parent ${PID}
        """
    )
    assert "config.yaml:4 models.m.cmd: ${PID} is only available in cmdStop" in message


def test_gpus_macro_joins_the_model_gpus() -> None:
    config = load(
        """
        models:
          m:
            gpus: [2, 3]
            cmd: docker run --gpus '"device=${GPUS}"' -p ${PORT}:80 img
        """
    )
    model = config.models["m"]
    assert model.gpus == ("2", "3")
    assert model.cmd[3] == '"device=2,3"'
    assert model.env == {}  # CUDA_VISIBLE_DEVICES is the daemon's to add


def test_gpus_macro_without_gpus_is_an_error() -> None:
    message = errors(
        """
        models:
          m:
            cmd: srv --port ${PORT} --devices ${GPUS}
        """
    )
    assert "models.m.cmd: ${GPUS} is only available when the model sets gpus" in message


def test_env_macros_come_from_the_environment_and_retype_unquoted_values() -> None:
    config = load(
        """
        startPort: ${env.SWAPD_PORT_BASE}
        models:
          m:
            cmd: ${env.HOME}/bin/srv --port ${PORT}
            name: "${env.SWAPD_PORT_BASE}"
        """
    )
    assert config.start_port == 7000
    assert config.models["m"].cmd[0] == "/home/u/bin/srv"
    assert config.models["m"].name == "7000"  # quoted in the file: stays a string


def test_unset_env_variable_is_an_error_naming_it() -> None:
    message = errors(
        """
        models:
          m:
            cmd: |
              srv --port ${PORT}
              --key ${env.SWAPD_SURELY_UNSET}
        """
    )
    assert (
        "config.yaml:6 models.m.cmd: environment variable 'SWAPD_SURELY_UNSET' is not set"
        in message
    )


def test_forward_reference_is_an_error_naming_both() -> None:
    message = errors(
        """
        macros:
          first: "--x ${second}"
          second: 1
        models:
          m:
            cmd: srv --port ${PORT} ${first}
        """
    )
    assert "macros.first: macro 'first' uses ${second}, which is defined after it" in message
    assert (
        "models.m.cmd: ${second} is left over: "
        "macro 'second' is defined after the macro that uses it" in message
    )


@pytest.mark.parametrize("name", ["PORT", "PID", "MODEL_ID", "GPUS"])
def test_reserved_macro_names_are_rejected(name: str) -> None:
    message = errors(
        f"""
        macros:
          {name}: 1
        models: {{}}
        """
    )
    assert f"config.yaml:3 macros.{name}: macro name '{name}' is reserved" in message


def test_bad_macro_declarations_are_each_reported() -> None:
    message = errors(
        """
        macros:
          "bad name": 1
          listy: [1, 2]
          selfish: "a ${selfish}"
        models:
          m:
            macros:
              PORT: 1
            cmd: srv --port ${PORT}
        """
    )
    assert "macros.bad name: invalid macro name 'bad name'" in message
    assert "macros.listy: macro 'listy' must be a string, number or boolean, got a list" in message
    assert "macros.selfish: macro 'selfish' refers to itself" in message
    assert "models.m.macros.PORT: macro name 'PORT' is reserved" in message


def test_unknown_macro_is_an_error_naming_it_with_a_suggestion() -> None:
    message = errors(
        """
        macros:
          model_dir: /models
        models:
          m:
            cmd: srv --port ${PORT} -m ${models_dir}/x.gguf
            description: ${nope}
        """
    )
    assert "models.m.cmd: unknown macro '${models_dir}'; did you mean '${model_dir}'?" in message
    assert "config.yaml:7 models.m.description: unknown macro '${nope}'" in message


def test_model_id_is_not_available_at_the_top_level() -> None:
    message = errors(
        """
        apiKeys: ["${MODEL_ID}"]
        models: {}
        """
    )
    assert "apiKeys[0]: ${MODEL_ID} is only available inside a model's settings" in message
