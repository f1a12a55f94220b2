"""Validation: every problem names file, line and key path, and all are reported together."""

from __future__ import annotations

import textwrap

import pytest

from swapd.daemon.config.loader import ConfigError, ConfigIssue, load_text


def issues(text: str, source: str = "config.yaml", *, strict: bool = False) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as caught:
        load_text(textwrap.dedent(text).lstrip("\n"), source, environ={}, strict=strict)
    error = caught.value
    assert str(error) == "\n".join(str(issue) for issue in error.issues)
    return error.issues


def messages(text: str, *, strict: bool = False) -> list[str]:
    return [str(issue) for issue in issues(text, strict=strict)]


def test_wrong_type_message_has_the_documented_shape() -> None:
    text = "# padding\n" * 10 + textwrap.dedent(
        """\
        models:
          comfyui_auto:
            cmd: comfy --port ${PORT}
            ttl: ten
        """
    )
    [issue] = issues(text)
    assert str(issue) == "config.yaml:14 models.comfyui_auto.ttl: expected an integer, got 'ten'"
    assert (issue.file, issue.line, issue.path) == ("config.yaml", 14, "models.comfyui_auto.ttl")


def test_all_errors_are_reported_together_in_line_order() -> None:
    found = messages(
        """
        healthCheckTimeout: soon
        models:
          a:
            cmd: srv --port ${PORT}
            chekEndpoint: /health
            unlisted: maybe
          b:
            cmd: srv --port ${PORT}
            concurrencyLimit: [1]
        apiKeys: [ok-key, ""]
        """,
        strict=True,
    )
    assert found == [
        "config.yaml:1 healthCheckTimeout: expected an integer, got 'soon'",
        "config.yaml:5 models.a.chekEndpoint: unknown key 'chekEndpoint'; "
        "did you mean 'checkEndpoint'?",
        "config.yaml:6 models.a.unlisted: expected true or false, got 'maybe'",
        "config.yaml:9 models.b.concurrencyLimit: expected an integer, got a list",
        "config.yaml:10 apiKeys[1]: empty API key",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("modles: {}\n", "config.yaml:1 modles: unknown key 'modles'; did you mean 'models'?"),
        ("models: {}\nhealthcheckTimeout: 20\n", "did you mean 'healthCheckTimeout'?"),
        (
            "models: {}\nzzz_unrelated: 1\n",
            "config.yaml:2 zzz_unrelated: unknown key 'zzz_unrelated'",
        ),
        (
            "models: {}\ngroups:\n  g:\n    member: []\n",
            "config.yaml:4 groups.g.member: unknown key 'member'; did you mean 'members'?",
        ),
        (
            "models: {}\npeers:\n  p:\n    proxy: http://h\n    models: [x]\n    api_key: k\n",
            "config.yaml:6 peers.p.api_key: unknown key 'api_key'; did you mean 'apiKey'?",
        ),
        (
            "models:\n  m:\n    cmd: srv --port ${PORT}\n    compat: {ignoreWebsocket: true}\n",
            "models.m.compat.ignoreWebsocket: unknown key 'ignoreWebsocket'; "
            "did you mean 'ignoreWebsockets'?",
        ),
        (
            "models: {}\nupstream:\n  ignorePath: []\n",
            "did you mean 'ignorePaths'?",
        ),
        (
            "models: {}\nhooks:\n  onStartup: {}\n",
            "config.yaml:3 hooks.onStartup: unknown key 'onStartup'; did you mean 'on_startup'?",
        ),
    ],
)
def test_unknown_keys_are_warnings_with_did_you_mean_and_errors_when_strict(
    text: str, expected: str
) -> None:
    """llama-swap ignores a key it does not know, so a config it loads loads here too (issue 25):
    the key is left out with a warning at its line; `check-config --strict` makes it an error."""
    loaded = load_text(text, environ={})
    warnings = [str(w) for w in loaded.warnings]
    assert any(
        expected in w and w.endswith("(ignored, as llama-swap ignores it)") for w in warnings
    )
    assert any(expected in message for message in messages(text, strict=True))


@pytest.mark.parametrize(
    ("text", "where", "meant"),
    [
        ("apikeys: [k]\n", "apikeys", "apiKeys"),
        ("apiKey: [k]\n", "apiKey", "apiKeys"),
        ("api_keys: [k]\n", "api_keys", "apiKeys"),
        ("ApiKeys: [k]\n", "ApiKeys", "apiKeys"),
        ("api-keys: &k [k]\n", "api-keys", "apiKeys"),  # a home for anchors is no excuse
        ("securty: {cors: {allowedOrigins: ['*']}}\n", "securty", "security"),
        ("security:\n  cros: {}\n", "security.cros", "cors"),
        ("security:\n  cors:\n    allowedOrigin: [x]\n", "security.cors.allowedOrigin", None),
    ],
)
def test_a_near_miss_of_a_security_key_is_an_error_even_when_not_strict(
    text: str, where: str, meant: str | None
) -> None:
    """A misspelt `apiKeys` was a warning, so swapd started (or a reload applied) with no key
    (issue 40, item 1): a near miss of a security key fails closed, whatever llama-swap does."""
    [issue] = issues("models: {}\n" + text)
    assert issue.path == where
    assert "near miss of a security key is an error" in issue.message
    if meant is not None:
        assert f"did you mean {meant!r}?" in issue.message


@pytest.mark.parametrize("name", ["secrets", "keys", "apiKeys_old", "apiTokens", "x-apikeys"])
def test_a_key_that_is_not_a_near_miss_of_a_security_key_stays_a_warning(name: str) -> None:
    loaded = load_text(f"models: {{}}\n{name}: [k]\n", environ={})
    assert not loaded.config.api_keys
    assert not any("near miss" in str(w) for w in loaded.warnings)


def test_alias_repeating_another_alias_or_a_model_id() -> None:
    text = """
        models:
          a:
            cmd: srv --port ${PORT}
            aliases: [shared, b, shared]
          b:
            cmd: srv --port ${PORT}
            aliases: [shared, ""]
        """
    found = messages(text)
    # llama-swap loads an alias that is another model's id (the id wins): a warning.
    with pytest.raises(ConfigError) as caught:
        load_text(textwrap.dedent(text).lstrip("\n"), environ={})
    assert (
        "config.yaml:4 models.a.aliases[1]: alias 'b' is the id of model 'b', which a request "
        "for it gets (as in llama-swap): this alias is never used"
    ) in [str(w) for w in caught.value.warnings]
    assert not any("is the id of model" in m for m in found)
    assert (
        "config.yaml:4 models.a.aliases[2]: duplicate alias 'shared': "
        "already an alias of this model" in found
    )
    assert (
        "config.yaml:7 models.b.aliases[0]: duplicate alias 'shared': already an alias of model 'a'"
        in found
    )
    assert "config.yaml:7 models.b.aliases[1]: an alias cannot be empty" in found


def test_ignore_path_that_does_not_compile() -> None:
    found = messages(
        """
        models: {}
        upstream:
          ignorePaths:
            - '^/ok$'
            - '(unclosed'
        """
    )
    assert len(found) == 1
    assert found[0].startswith(
        "config.yaml:5 upstream.ignorePaths[1]: invalid regular expression '(unclosed': "
    )


def test_model_defined_locally_and_on_a_peer() -> None:
    found = messages(
        """
        models:
          shared:
            cmd: srv --port ${PORT}
        peers:
          p:
            proxy: http://10.0.0.9
            models: [other, shared]
        """
    )
    assert found == [
        "config.yaml:7 peers.p.models[1]: model 'shared' is defined both locally (line 2) "
        "and on peer 'p'"
    ]


def test_peer_problems() -> None:
    found = messages(
        """
        models:
          p/x:
            cmd: srv --port ${PORT}
        peers:
          p:
            proxy: not a url
            models: [x]
          q:
            models: []
        """
    )
    assert (
        "config.yaml:2 models.p/x: model id 'p/x' is also the full name of a model on peer 'p'"
        in (found)
    )
    assert (
        "config.yaml:6 peers.p.proxy: expected an http:// or https:// URL with a host, "
        "got 'not a url'" in found
    )
    assert "config.yaml:8 peers.q.proxy: proxy is required: the peer's base URL" in found
    assert "config.yaml:9 peers.q.models: a peer must list at least one model" in found


def test_port_in_proxy_of_a_model_whose_cmd_does_not_use_it() -> None:
    found = messages(
        """
        models:
          m:
            cmd: srv --port 8000
            proxy: http://127.0.0.1:${PORT}
        """
    )
    assert found == [
        "config.yaml:4 models.m.proxy: proxy uses ${PORT} but cmd does not - "
        "${PORT} is only available when used in cmd"
    ]


def test_missing_cmd_and_proxy() -> None:
    found = messages(
        """
        models:
          no-cmd:
            proxy: http://127.0.0.1:8000
          nothing: {}
          null-model:
          fixed-port:
            cmd: srv --port 8000
        """
    )
    assert found == [
        "config.yaml:2 models.no-cmd.cmd: cmd is required: the command that starts the model's "
        "server",
        "config.yaml:4 models.nothing.cmd: cmd is required: the command that starts the model's "
        "server",
        "config.yaml:5 models.null-model: expected a mapping with at least cmd, got null",
        "config.yaml:6 models.fixed-port.proxy: the default proxy http://localhost:${PORT} needs "
        "${PORT} in cmd; use ${PORT} in cmd or set proxy",
    ]


def test_empty_or_unsplittable_cmd() -> None:
    found = messages(
        """
        models:
          a:
            proxy: http://127.0.0.1:1
            cmd: |
              # only a comment
          b:
            proxy: http://127.0.0.1:2
            cmd: srv 'open quote
            cmdStop: kill "${PID}
        """
    )
    assert "config.yaml:4 models.a.cmd: is empty (only blanks or comment lines)" in found
    assert "config.yaml:8 models.b.cmd: cannot split into words: No closing quotation" in found
    assert "config.yaml:9 models.b.cmdStop: cannot split into words: No closing quotation" in found


def test_group_members_that_are_not_models_or_in_two_groups() -> None:
    found = messages(
        """
        models:
          alpha:
            cmd: srv --port ${PORT}
            aliases: [a]
          beta:
            cmd: srv --port ${PORT}
        groups:
          one:
            members: [alpha, alpah, a, beta, beta]
          two:
            members: [beta]
        """
    )
    assert found == [
        "config.yaml:9 groups.one.members[1]: 'alpah' is not a model; did you mean 'alpha'?",
        "config.yaml:9 groups.one.members[2]: 'a' is not a model; it is an alias of 'alpha', "
        "list the model id",
        "config.yaml:9 groups.one.members[4]: model 'beta' is listed twice in this group",
        "config.yaml:11 groups.two.members[0]: model 'beta' is already a member of group 'one'",
    ]


@pytest.mark.parametrize("ttl", [-2, -100])
def test_negative_ttl_other_than_minus_one(ttl: int) -> None:
    found = messages(f"models:\n  m:\n    cmd: srv --port ${{PORT}}\n    ttl: {ttl}\n")
    assert found == [
        "config.yaml:4 models.m.ttl: must be 0 (never unload), seconds to stay idle, or -1 "
        f"(use globalTTL), got {ttl}"
    ]


def test_negative_numbers_elsewhere() -> None:
    found = messages(
        """
        globalTTL: -1
        startPort: 0
        unloadTimeout: -3
        models:
          m:
            cmd: srv --port ${PORT}
            unloadTimeout: -1
            concurrencyLimit: -5
        """
    )
    assert found == [
        "config.yaml:1 globalTTL: must be at least 0, got -1",
        "config.yaml:2 startPort: must be at least 1, got 0",
        "config.yaml:3 unloadTimeout: must be at least 0, got -3",
        "config.yaml:7 models.m.unloadTimeout: must be at least 0, got -1",
        "config.yaml:8 models.m.concurrencyLimit: must be at least 0, got -5",
    ]


def test_bad_api_keys_are_reported_without_quoting_the_key() -> None:
    found = messages(
        """
        apiKeys:
          - good-key
          - ""
          - "sk secret with spaces"
          - "   "
        models: {}
        """
    )
    assert found == [
        "config.yaml:3 apiKeys[1]: empty API key",
        "config.yaml:4 apiKeys[2]: an API key cannot contain spaces",
        "config.yaml:5 apiKeys[3]: empty API key",
    ]
    assert not any("secret" in message for message in found)


def test_bad_env_and_gpus_entries() -> None:
    found = messages(
        """
        models:
          m:
            cmd: srv --port ${PORT}
            env: ["NO_EQUALS", "1BAD=x", "OK=1"]
            gpus: [0, -1, 0, "", 1.5]
          n:
            cmd: srv --port ${PORT}
            gpus: "0,1"
          o:
            cmd: srv --port ${PORT}
            gpus: []
        """
    )
    assert (
        "config.yaml:4 models.m.env[0]: expected NAME=value with a variable name, got 'NO_EQUALS'"
        in (found)
    )
    assert (
        "config.yaml:4 models.m.env[1]: expected NAME=value with a variable name, got '1BAD=x'"
        in found
    )
    assert (
        "config.yaml:5 models.m.gpus[1]: expected a GPU index (0, 1, ...) or UUID, got -1" in found
    )
    assert "config.yaml:5 models.m.gpus[2]: GPU 0 is listed twice" in found
    assert (
        "config.yaml:5 models.m.gpus[3]: expected a GPU index (0, 1, ...) or UUID, got ''" in found
    )
    assert (
        "config.yaml:5 models.m.gpus[4]: expected a GPU index (0, 1, ...) or UUID, got 1.5" in found
    )
    assert (
        "config.yaml:8 models.n.gpus: expected auto or a list of GPU indices or UUIDs "
        "such as [0, 1], got '0,1'" in found
    )
    assert "config.yaml:11 models.o.gpus: lists no GPU; leave gpus out to use every GPU" in found


def test_check_endpoint_and_proxy_shapes() -> None:
    found = messages(
        """
        models:
          m:
            cmd: srv --port 9
            proxy: ftp://127.0.0.1:9
          n:
            cmd: srv --port 9
            proxy: http://127.0.0.1:99999
        """
    )
    assert (
        "config.yaml:4 models.m.proxy: expected an http:// or https:// URL with a host, "
        "got 'ftp://127.0.0.1:9'" in found
    )
    assert any(m.startswith("config.yaml:7 models.n.proxy: invalid URL") for m in found)


def test_check_endpoint_llama_swap_loads_is_a_warning() -> None:
    """llama-swap loads a checkEndpoint without its leading '/', or written as a whole URL (its
    reverse proxy asks the model's upstream for the path): so does swapd, with a warning."""
    text = "models:\n  m:\n    cmd: srv --port ${PORT}\n    checkEndpoint: %s\n"
    for written, asked in (("health", "/health"), ("http://elsewhere:9/ready?x=1", "/ready?x=1")):
        loaded = load_text(text % written, environ={})
        assert loaded.config.models["m"].check_endpoint == asked
        [warning] = loaded.warnings
        assert str(warning).startswith(
            "config.yaml:4 models.m.checkEndpoint: expected a path starting with '/' or 'none', "
            f"got {written!r}: asks for {asked!r}"
        )


def test_yaml_syntax_error_has_its_line() -> None:
    [issue] = issues("models:\n  m:\n    cmd: [unclosed\n  n: {}\n")
    assert issue.line is not None and issue.line >= 3
    assert issue.message.startswith("YAML syntax error:")


def test_tabs_and_bad_indentation_are_syntax_errors() -> None:
    [issue] = issues("models:\n\tm: {}\n")
    assert issue.line == 2
    assert "YAML syntax error" in issue.message


@pytest.mark.parametrize(
    ("text", "got"),
    [("- a\n- b\n", "a list"), ("just text\n", "'just text'"), ("42\n", "42")],
)
def test_top_level_must_be_a_mapping(text: str, got: str) -> None:
    [issue] = issues(text)
    assert issue.message == f"the top level must be a mapping (keys such as models:), got {got}"


def test_models_must_be_a_mapping_and_each_model_too() -> None:
    assert messages("models: [a, b]\n") == [
        "config.yaml:1 models: expected a mapping of model ids, got a list"
    ]
    assert messages("models:\n  m: srv --port 9\n") == [
        "config.yaml:2 models.m: expected a mapping with at least cmd, got 'srv --port 9'"
    ]


def test_several_documents_are_an_error() -> None:
    [issue] = issues("models: {}\n---\nmodels: {}\n")
    assert "expected a single document" in issue.message


def test_recursive_and_exploding_aliases_are_refused() -> None:
    [issue] = issues("models: &a\n  m: *a\n")
    assert "YAML alias refers to itself" in issue.message
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level in "bcdefg":
        previous = chr(ord(level) - 1)
        laughs += f"{level}: &{level} [*{previous}, *{previous}, *{previous}, *{previous}, "
        laughs += f"*{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}]\n"
    [issue] = issues(laughs)
    assert "YAML document is too large" in issue.message


def test_errors_name_the_source_given() -> None:
    [issue] = issues("models: 3\n", source="/etc/swapd/config.yaml")
    assert str(issue) == "/etc/swapd/config.yaml:1 models: expected a mapping of model ids, got 3"


def test_deeply_nested_document_is_a_config_error() -> None:
    [issue] = issues("models: " + "[" * 700 + "]" * 700 + "\n")
    assert issue.message == "YAML document is nested too deeply"


def test_unprintable_character_is_a_syntax_error_with_its_line() -> None:
    [issue] = issues("models:\n  m:\n    cmd: a\x1fb\n")
    assert str(issue) == "config.yaml:3: YAML syntax error: character U+001F is not allowed"


def test_indices_in_messages_are_positions_in_the_file() -> None:
    found = messages(
        """
        apiKeys: [null, [x], "has space"]
        models:
          m:
            cmd: srv --port ${PORT}
            env: [null, "bad"]
        groups:
          g: {members: [null, nope]}
        """
    )
    assert found == [
        "config.yaml:1 apiKeys[0]: expected a string, got null",
        "config.yaml:1 apiKeys[1]: expected a string, got a list",
        "config.yaml:1 apiKeys[2]: an API key cannot contain spaces",
        "config.yaml:5 models.m.env[0]: expected a string, got null",
        "config.yaml:5 models.m.env[1]: expected NAME=value with a variable name, got 'bad'",
        "config.yaml:7 groups.g.members[0]: expected a string, got null",
        "config.yaml:7 groups.g.members[1]: 'nope' is not a model",
    ]


def test_integers_too_large_for_the_ipc_codec() -> None:
    big = 2**64
    found = messages(
        f"""
        globalTTL: {big}
        models:
          m:
            cmd: srv --port ${{PORT}}
            metadata: {{sizes: [1, {big}]}}
            filters: {{setParams: {{seed: -{big}}}}}
        """
    )
    assert found == [
        f"config.yaml:1 globalTTL: must be at most {2**63 - 1}, got {big}",
        f"config.yaml:5 models.m.metadata.sizes[1]: integer out of range "
        f"({-(2**63)} to {2**63 - 1})",
        f"config.yaml:6 models.m.filters.setParams.seed: integer out of range "
        f"({-(2**63)} to {2**63 - 1})",
    ]
