"""The examples in docs/configuration.md are real: each complete config in it loads."""

from __future__ import annotations

import re

from swapd.daemon.config.loader import load_config_text
from tests.support.paths import REPO

DOC = REPO / "docs" / "configuration.md"


def test_every_complete_yaml_example_loads() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    configs = [block for block in blocks if block.startswith(("models:", "healthCheckTimeout:"))]
    assert configs, "the page shows at least one complete config"
    for text in configs:
        config = load_config_text(text, "docs/configuration.md", environ={})
        assert config.models


def test_the_first_example_means_what_the_page_says() -> None:
    text = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)[0]
    config = load_config_text(text, environ={})
    qwen = config.models["qwen"]
    assert "-ngl" not in qwen.cmd  # the comment line is dropped
    assert config.models["comfyui_auto"].cmd[5:7] == ("--gpus", '"device=2,3"')
    assert config.models["comfyui_auto"].concurrency_limit == 999
