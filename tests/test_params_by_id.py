"""`filters.setParamsByID`: each name is one a client can ask for (an alias, listed in /v1/models
as llama-swap lists aliases), and its params reach the upstream after `setParams`. Config checks
without processes; the rest through the real stack (fake_model.py stands for llama-server)."""

from __future__ import annotations

import base64
import json
import textwrap
import urllib.request
from typing import Any

import pytest

from swapd.daemon.config import ConfigError, load_config_text
from tests.hostile_support import RequestLog
from tests.stack import fake_model_cmd, free_port_range

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


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


@pytest.mark.processes
def test_a_by_id_name_reaches_the_upstream_with_its_params(stack_factory, tmp_path) -> None:
    log = RequestLog(tmp_path / "requests.jsonl")
    cmd = fake_model_cmd("gpt-oss-120b", "--request-log", str(log.path))
    config = textwrap.dedent(
        f"""
        startPort: {free_port_range(2)}
        includeAliasesInList: true
        models:
          gpt-oss-120b:
            cmd: {cmd}
            proxy: http://127.0.0.1:${{PORT}}
            filters:
              setParams: {{temperature: 0.5, reasoning_effort: low}}
              setParamsByID:
                "gpt-oss-120b:high": {{reasoning_effort: high, chat_template_kwargs.x: 1}}
        """
    )
    stack = stack_factory(config)
    _post(stack.url, {"model": "gpt-oss-120b:high", "messages": []})
    _post(stack.url, {"model": "gpt-oss-120b", "messages": []})
    bodies = [
        json.loads(base64.b64decode(e["body_b64"]))
        for e in log.entries()
        if e["raw_path"] == "/v1/chat/completions"
    ]
    assert bodies == [
        {
            "model": "gpt-oss-120b:high",  # no useModelName: the name goes as asked
            "messages": [],
            "temperature": 0.5,
            "reasoning_effort": "high",  # after setParams
            "chat_template_kwargs": {"x": 1},
        },
        {"model": "gpt-oss-120b", "messages": [], "temperature": 0.5, "reasoning_effort": "low"},
    ]
    with urllib.request.urlopen(stack.url + "/v1/models", timeout=10) as response:
        listed = {m["id"]: m for m in json.load(response)["data"]}
    assert set(listed) == {"gpt-oss-120b", "gpt-oss-120b:high"}
    assert listed["gpt-oss-120b:high"]["meta"]["llamaswap"]["type"] == "alias"


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
