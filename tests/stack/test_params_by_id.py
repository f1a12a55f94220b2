"""`filters.setParamsByID`: each name is one a client can ask for (an alias, listed in /v1/models
as llama-swap lists aliases), and its params reach the upstream after `setParams`. Config checks:
tests/unit/test_params_by_id.py; here, through the real stack (fake_model.py stands for
llama-server)."""

from __future__ import annotations

import base64
import json
import textwrap
import urllib.request
from typing import Any

import pytest

from tests.support.hostile import RequestLog
from tests.support.stack import fake_model_cmd, free_port_range


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
