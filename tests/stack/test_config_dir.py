"""`--config-dir` (llama-swap's `-config-dir`): the `-c` file, then the directory's `*.yml` and
`*.yaml` files in sorted order, merged by llama-swap's rules, with every error at its own file and
line (tests/unit/test_config_dir.py). Here, the real stack (fake_model.py stands for llama-server):
`swapd run -c ... --config-dir ... --watch-config` serves the models of every file, and a file added
to the directory is applied while an unchanged model keeps its process."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.daemon import chat
from tests.support.stack import fake_model_cmd, free_port_range, wait_for


def _model(name: str) -> dict[str, Any]:
    return {"cmd": fake_model_cmd(name), "proxy": "http://127.0.0.1:${PORT}", "unloadTimeout": 3}


@pytest.mark.processes
def test_swapd_run_with_a_config_dir_follows_files_added_to_it(stack_factory, tmp_path) -> None:
    start = free_port_range(4)
    main = {"healthCheckTimeout": 15, "startPort": start, "models": {"a": _model("a")}}
    confd = tmp_path / "conf.d"
    confd.mkdir()

    def group(name: str, members: list[str]) -> dict[str, Any]:
        spec = {"swap": False, "exclusive": False, "members": members}
        return {"routing": {"router": {"settings": {"groups": {name: spec}}}}}

    # Every file's group merges into one routing.router.settings.groups: nothing swaps.
    (confd / "10-b.yaml").write_text(
        yaml.safe_dump({**group("pair", ["a", "b"]), "models": {"b": _model("b")}})
    )
    stack = stack_factory(main, run_args=("--config-dir", str(confd), "--watch-config"))
    pid_a = chat(stack.url, "a")["served_by"]["pid"]
    assert chat(stack.url, "b")["served_by"]["name"] == "b"

    (confd / "20-c.yaml").write_text(
        yaml.safe_dump({**group("solo", ["c"]), "models": {"c": _model("c")}})
    )
    known = lambda: any(m["model"] == "c" for m in stack.status()["models"])  # noqa: E731
    wait_for(known, 3.0, 0.1, "the new file in --config-dir to be applied")
    assert chat(stack.url, "c")["served_by"]["name"] == "c"
    assert (stack.model("a")["state"], stack.model("a")["pid"]) == ("ready", pid_a)
    out = stack.swapd("reload").stdout
    assert f"reloaded {stack.config_path} + {confd}/*.yaml" in out, out
