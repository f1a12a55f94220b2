"""docs/clients.md's snippets are real: each `python` and `sh` block runs against a real swapd
(as the page says, models `qwen` and `nomic`: tests/support/upstreams/fake_model.py, standing for
llama-server) and succeeds, with the page's `http://localhost:8080` replaced by the stack's URL.
`sh` blocks run under `bash -euo pipefail` with curl, `swapd` being the installed command pointed
at the stack's run directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from swapd.daemon.config.loader import load_config_text
from tests.support.paths import REPO
from tests.support.proxy import local_model, model_ports
from tests.support.stack import PYTHON, Stack

pytestmark = pytest.mark.processes

DOC = REPO / "docs" / "clients.md"
PAGE_URL = "http://localhost:8080"
BLOCKS = re.findall(r"```(python|sh)\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    qwen, nomic = model_ports(2)
    config = {
        "healthCheckTimeout": 15,
        "models": {"qwen": local_model("qwen", qwen), "nomic": local_model("nomic", nomic)},
    }
    with Stack(config) as stack:
        yield stack


def test_the_page_has_a_snippet_for_each_client() -> None:
    text = DOC.read_text()
    assert [kind for kind, _ in BLOCKS].count("python") >= 2  # OpenAI's SDK, Ollama's client
    for needle in ("from openai import OpenAI", "import ollama", "/models/load", "/api/tags"):
        assert any(needle in code for _, code in BLOCKS), needle
    assert "Open WebUI" in text


def test_the_open_webui_guide_config_loads_and_does_what_the_page_says() -> None:
    # Issue 41: a guide to a working chat; tools need --jinja, the task model shares a group.
    section = DOC.read_text().split("## Open WebUI\n", 1)[1].split("\n## ", 1)[0]
    (text,) = re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)
    config = load_config_text(text, "docs/clients.md", environ={})
    chat, small = config.models["qwen"], config.models["qwen-small"]
    assert "--jinja" in chat.cmd and "--jinja" in small.cmd
    assert chat.send_loading_state
    (group,) = config.groups.values()
    assert set(group.members) == {"qwen", "qwen-small"} and not group.swap
    for words in ("Current Model", "TASK_MODEL", "two swaps", "message.thinking"):
        assert words in section, words


@pytest.mark.parametrize(("kind", "code"), BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_snippet_runs(stack: Stack, kind: str, code: str) -> None:
    assert PAGE_URL in code or "swapd load" in code
    code = code.replace(PAGE_URL, stack.url)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("OLLAMA_HOST", None)
    if kind == "python":
        argv = [PYTHON, "-c", code]
    else:
        wrapper = f'swapd() {{ command swapd "$@" --run-dir {stack.run_dir}; }}\n'
        argv = ["bash", "-euo", "pipefail", "-c", wrapper + code]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), "a snippet shows what it got"
    assert "error" not in done.stdout.lower(), done.stdout
