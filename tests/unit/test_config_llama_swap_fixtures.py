"""Configs equivalent to llama-swap's own test fixtures for env macros, peers and YAML anchors load
or fail as llama-swap says (issue 25; written here, none copied), a config llama-swap loads always
loads (an unknown key is a warning, an error with `strict`), the `ui` and `performance` sections
are read, and the six configs issue 29 found accepted without a word are each flagged at their
line: a warning where llama-swap loads them, an error where it refuses them."""

from __future__ import annotations

import textwrap

import pytest

from swapd.daemon.config.loader import ConfigError, Loaded, load_text
from swapd.daemon.config.shape import DEFAULT_CHECK_ENDPOINT


def _load(text: str, environ: dict[str, str] | None = None, *, strict: bool = False) -> Loaded:
    return load_text(textwrap.dedent(text).lstrip("\n"), environ=environ or {}, strict=strict)


def _errors(text: str, environ: dict[str, str] | None = None, *, strict: bool = False) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _load(text, environ, strict=strict)
    return [str(issue) for issue in caught.value.issues]


def _warnings(loaded: Loaded) -> list[str]:
    return [str(w) for w in loaded.warnings]


# -- env macros ----------------------------------------------------------------------------------


def test_env_macro_in_a_flow_list_is_not_a_yaml_error() -> None:
    """llama-swap replaces `${env.X}` before it parses YAML, so `[${env.KEY}]` is a list of one
    key there (its regression test for exactly this); PyYAML alone would read the braces as a
    flow mapping."""
    env = {"SWAPD_T_KEY": "secret-one", "SWAPD_T_KEY2": "secret-two"}
    loaded = _load(
        """
        apiKeys: [${env.SWAPD_T_KEY}, "${env.SWAPD_T_KEY2}", static]
        models:
          m: {cmd: "srv --port ${PORT}", aliases: [${env.SWAPD_T_ALIAS}]}
        """,
        {**env, "SWAPD_T_ALIAS": "nick"},
    )
    assert loaded.config.api_keys == ("secret-one", "secret-two", "static")
    assert loaded.config.models["m"].aliases == ("nick",)
    assert loaded.warnings == ()


def test_env_macro_unset_or_empty_in_a_flow_list_names_its_line() -> None:
    text = "models: {}\napiKeys: [ok, ${env.SWAPD_T_MISSING}]\n"
    assert _errors(text) == [
        "config.yaml:2 apiKeys[1]: environment variable 'SWAPD_T_MISSING' is not set "
        "(used as ${env.SWAPD_T_MISSING})"
    ]
    quoted = 'models: {}\napiKeys: [ok, "${env.SWAPD_T_MISSING}"]\n'
    assert _errors(quoted, {"SWAPD_T_MISSING": ""}) == ["config.yaml:2 apiKeys[1]: empty API key"]


def test_env_macros_in_every_kind_of_value() -> None:
    env = {"SWAPD_T_DIR": "/opt/m", "SWAPD_T_HOST": "box", "SWAPD_T_SIG": "SIGINT"}
    loaded = _load(
        """
        macros:
          SERVER: "${env.SWAPD_T_DIR}/bin/server"
        models:
          test:
            macros:
              FILE: ${env.SWAPD_T_DIR}/model.gguf
            cmd: ${SERVER} --model ${FILE} --port ${PORT}
            cmdStop: kill -${env.SWAPD_T_SIG} ${PID}
            proxy: "http://${env.SWAPD_T_HOST}:${PORT}"
            metadata: {nested: {where: "${env.SWAPD_T_HOST}"}}
            filters: {stripParams: "${env.SWAPD_T_SIG}"}
        """,
        env,
    )
    model = loaded.config.models["test"]
    assert model.cmd == ("/opt/m/bin/server", "--model", "/opt/m/model.gguf", "--port", "5800")
    assert model.cmd_stop == ("kill", "-SIGINT", "${PID}")
    assert model.proxy == "http://box:5800"
    assert model.metadata == {"nested": {"where": "box"}}
    assert model.filters.strip_params == ("SIGINT",)


def test_env_macro_unset_in_a_global_macro_is_an_error() -> None:
    [error] = _errors("macros:\n  P: ${env.SWAPD_T_NOPE}\nmodels: {}\n")
    assert "SWAPD_T_NOPE" in error and "not set" in error and error.startswith("config.yaml:2")


def test_env_macro_in_a_comment_is_not_read() -> None:
    assert _load("# apiKeys: [${env.SWAPD_T_NOPE}]\nmodels: {}\n").config.api_keys == ()


# -- peers -----------------------------------------------------------------------------------------

PEER = """
peers:
  peer:
    proxy: http://127.0.0.1:9
    models: [model]
"""


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "models:\n  local:\n    cmd: srv --port ${PORT}\n"
            "    filters:\n      setParamsByID:\n        peer/model: {temperature: 0.5}\n",
            "config.yaml:6 models.local.filters.setParamsByID.peer/model: setParamsByID key "
            "'peer/model' is the full name of a model on peer 'peer'",
        ),
        (
            "models:\n  local:\n    cmd: srv --port ${PORT}\n    aliases: [peer/model]\n",
            "config.yaml:4 models.local.aliases[0]: alias 'peer/model' is the full name of a "
            "model on peer 'peer'",
        ),
        (
            "models:\n  peer/model:\n    cmd: srv --port ${PORT}\n",
            "config.yaml:2 models.peer/model: model id 'peer/model' is also the full name of a "
            "model on peer 'peer'",
        ),
        (
            "models:\n  local:\n    cmd: srv --port ${PORT}\n"
            "selectors:\n  peer/model:\n    strategy: pin\n    targets: [local]\n",
            "config.yaml:5 selectors.peer/model: selector id 'peer/model' is the full name of a "
            "model on peer 'peer'",
        ),
        (
            "models:\n  local:\n    cmd: srv --port ${PORT}\n"
            "profiles:\n  p:\n    pins:\n      peer/model: local\n",
            "config.yaml:7 profiles.p.pins.peer/model: pin 'peer/model' is the full name of a "
            "model on peer 'peer'",
        ),
    ],
)
def test_a_peer_models_full_name_is_reserved(body: str, expected: str) -> None:
    """llama-swap's `ValidatePeerNamespace`: nothing local may take a peer model's full name,
    which it would shadow."""
    assert expected in _errors(body + PEER)


def test_two_peers_making_the_same_full_name_are_ambiguous() -> None:
    text = """
    models: {}
    peers:
      a:
        proxy: http://127.0.0.1:9
        models: [b/c]
      a/b:
        proxy: http://127.0.0.1:9
        models: [c]
    """
    [error] = _errors(text)
    assert "peer model name 'a/b/c' is ambiguous between peers 'a' and 'a/b'" in error


# -- anchors ---------------------------------------------------------------------------------------


def test_defs_holding_model_anchors_expand_each_models_own_macros() -> None:
    loaded = _load(
        """
        defs:
          model: &model
            cmd: echo ${LOCAL}
            proxy: http://localhost:8080
            env: ["MODEL_VALUE=${LOCAL}"]
            metadata: {value: "${LOCAL}"}
        models:
          first:
            <<: *model
            macros: {LOCAL: first-value}
          second:
            <<: *model
            macros: {LOCAL: second-value}
        """
    )
    assert loaded.warnings == ()  # a home for anchors, not a mistyped key
    for model_id in ("first", "second"):
        model = loaded.config.models[model_id]
        value = f"{model_id}-value"
        assert model.cmd == ("echo", value)
        assert model.env == {"MODEL_VALUE": value}
        assert model.metadata == {"value": value}


def test_defs_holding_capabilities_merged_with_a_list_and_macros() -> None:
    loaded = _load(
        """
        macros: {default_ctx: 98304}
        defs:
          vlm: &vlm {in: [text, image], out: [text], tools: true}
          llm: &llm
            in: [text]
            out: [text]
            tools: true
            context: ${default_ctx}
        models:
          glm:
            capabilities:
              <<: [*llm]
              context: 202752
            cmd: srv --port ${PORT}
          small:
            macros: {default_ctx: 4096}
            capabilities: {<<: [*llm]}
            cmd: srv --port ${PORT}
          eyes:
            capabilities: *vlm
            cmd: srv --port ${PORT}
        """
    )
    assert loaded.warnings == ()
    models = loaded.config.models
    glm, small, eyes = models["glm"].capabilities, models["small"].capabilities, models["eyes"]
    assert glm is not None and (glm.inputs, glm.tools, glm.context) == (("text",), True, 202752)
    assert small is not None and small.context == 4096
    assert eyes.capabilities is not None and eyes.capabilities.inputs == ("text", "image")


def test_a_top_level_key_without_anchors_is_an_unknown_key() -> None:
    [warning] = _warnings(_load("defs:\n  a: 1\nmodels: {}\n"))
    assert warning == (
        "config.yaml:1 defs: unknown key 'defs'; did you mean 'models'? "
        "(ignored, as llama-swap ignores it)"
    )


# -- unknown keys ----------------------------------------------------------------------------------


def test_a_key_llama_swap_adds_tomorrow_does_not_stop_the_config() -> None:
    text = """
    websocketStrategy: proxy
    models:
      m:
        cmd: srv --port ${PORT}
        chekEndpoint: /ready
    """
    loaded = _load(text)
    assert loaded.config.models["m"].check_endpoint == DEFAULT_CHECK_ENDPOINT
    assert _warnings(loaded) == [
        "config.yaml:1 websocketStrategy: unknown key 'websocketStrategy' "
        "(ignored, as llama-swap ignores it)",
        "config.yaml:5 models.m.chekEndpoint: unknown key 'chekEndpoint'; did you mean "
        "'checkEndpoint'? (ignored, as llama-swap ignores it)",
    ]
    assert _errors(text, strict=True) == [
        "config.yaml:1 websocketStrategy: unknown key 'websocketStrategy'",
        "config.yaml:5 models.m.chekEndpoint: unknown key 'chekEndpoint'; did you mean "
        "'checkEndpoint'?",
    ]


# -- ui and performance ----------------------------------------------------------------------------


def test_ui_and_performance_are_read() -> None:
    config = _load("models: {}\n").config
    assert config.session_headers == ("X-Session-ID", "X-Litellm-Session-Id")
    assert (config.performance_disabled, config.performance_every) == (False, 5.0)
    config = _load(
        """
        ui:
          activity:
            session_id: [" X-Conversation ", x-conversation, "", X-Other]
        performance: {disabled: true, every: 1m30s}
        models: {}
        """
    ).config
    assert config.session_headers == ("X-Conversation", "X-Other")
    assert (config.performance_disabled, config.performance_every) == (True, 90.0)


@pytest.mark.parametrize(
    ("every", "message"),
    [
        ("1s", "every must be at least 5s, got 1s"),
        ("10", "every must be at least 5s, got 10ns"),  # a bare integer is Go's nanoseconds
        ("soon", "expected a duration such as 5s or 1m, got 'soon'"),
    ],
)
def test_performance_every_as_llama_swap_checks_it(every: str, message: str) -> None:
    assert _errors(f"performance:\n  every: {every}\nmodels: {{}}\n") == [
        f"config.yaml:2 performance.every: {message}"
    ]


# -- issue 29's six -----------------------------------------------------------------------------

MODEL = "models:\n  m:\n    cmd: /bin/sleep 100\n    proxy: http://127.0.0.1:9000\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "upstream:\n  ignorePaths: [5]\n" + MODEL,
            "config.yaml:2 upstream.ignorePaths[0]: expected a string, got 5: read as '5'",
        ),
        (
            MODEL + "    checkEndpoint: '/he alth'\n",
            "config.yaml:5 models.m.checkEndpoint: '/he alth' holds whitespace, which no request "
            "path has: the health check asks for '/he%20alth'",
        ),
        (
            MODEL + "    aliases: [1]\n",
            "config.yaml:5 models.m.aliases[0]: expected a string, got 1: read as '1'",
        ),
        (
            MODEL + "    useModelName: 5\n",
            "config.yaml:5 models.m.useModelName: expected a string, got 5: read as '5'",
        ),
        (
            "apiKeys: [1, 2]\n" + MODEL,
            # The key's value is never shown.
            "config.yaml:1 apiKeys[1]: expected a string, got a number or boolean: read as its "
            "text",
        ),
        (
            "models:\n  m:\n    cmd: /bin/sleep ${PORT\n    proxy: http://127.0.0.1:9000\n",
            "config.yaml:3 models.m.cmd: '${PORT' is not a macro (no closing '}'): kept as text",
        ),
    ],
)
def test_what_llama_swap_loads_loads_with_a_warning_at_its_line(text: str, expected: str) -> None:
    warnings = _warnings(_load(text))
    assert any(w.startswith(expected) for w in warnings), warnings


def test_the_unterminated_port_llama_swap_refuses_is_an_error() -> None:
    """With the default proxy, `${PORT` leaves `cmd` without `${PORT}`: llama-swap refuses the
    proxy's `${PORT}`, and so does swapd (the cmd's line is warned about as well)."""
    with pytest.raises(ConfigError) as caught:
        _load("models:\n  m:\n    cmd: /bin/sleep ${PORT\n")
    assert [str(i) for i in caught.value.issues] == [
        "config.yaml:2 models.m.proxy: the default proxy http://localhost:${PORT} needs ${PORT} "
        "in cmd; use ${PORT} in cmd or set proxy"
    ]
    assert any(
        str(w).startswith("config.yaml:3 models.m.cmd: '${PORT'") for w in caught.value.warnings
    )
