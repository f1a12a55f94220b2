"""`swapd reload` through the real stack: a running model keeps its `${PORT}` when models are
added or removed (so it is not restarted), new models get ports nobody holds, only models whose
definition changed are stopped, and the reload prints the warnings `check-config` prints."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.daemon import chat
from tests.support.stack import PYTHON, fake_model_cmd, free_port_range, http_get

pytestmark = pytest.mark.processes


def _config(start: int, models: dict[str, list[str]], **model_extra: object) -> dict[str, object]:
    spec = {"proxy": "http://127.0.0.1:${PORT}", "unloadTimeout": 3, **model_extra}
    running = [m for m in ("b", "d") if m in models]
    return {
        "healthCheckTimeout": 15,
        "startPort": start,
        # b and d run side by side, and a (which sorts before both) beside them.
        "groups": {
            "pair": {"swap": False, "exclusive": False, "members": running},
            **({"solo": {"exclusive": False, "members": ["a"]}} if "a" in models else {}),
        },
        "models": {m: {"cmd": fake_model_cmd(m, *extra), **spec} for m, extra in models.items()},
    }


def test_adding_and_removing_models_keeps_running_ports_and_stops_only_changed(
    stack_factory,
) -> None:
    start = free_port_range(8)
    stack = stack_factory(_config(start, {"b": [], "d": []}))
    chat(stack.url, "b")
    chat(stack.url, "d")
    before = {m: stack.model(m) for m in ("b", "d")}
    assert [before["b"]["port"], before["d"]["port"]] == [start, start + 1]

    # A model that sorts first: before, it took startPort and renumbered b and d.
    stack.write_config(_config(start, {"a": [], "b": [], "d": []}))
    out = stack.swapd("reload").stdout
    assert "stopped" not in out, out
    for m in ("b", "d"):
        entry = stack.model(m)
        assert (entry["state"], entry["pid"], entry["port"]) == (
            "ready",
            before[m]["pid"],
            before[m]["port"],
        )
    added = stack.model("a")["port"]
    assert added not in (before["b"]["port"], before["d"]["port"])
    assert chat(stack.url, "a")["served_by"]["name"] == "a"

    # Remove a, change b's definition: only b is stopped; d keeps its process and port.
    stack.write_config(_config(start, {"b": ["--health-delay", "0"], "d": []}))
    out = stack.swapd("reload").stdout
    assert "stopped changed models: b" in out and "d" not in out.split("changed models:")[1]
    assert stack.model("b")["state"] == "stopped"
    d = stack.model("d")
    assert (d["state"], d["pid"], d["port"]) == ("ready", before["d"]["pid"], before["d"]["port"])
    assert chat(stack.url, "b")["served_by"]["port"] == before["b"]["port"]


def test_reload_prints_the_warnings_check_config_prints(stack_factory) -> None:
    start = free_port_range(4)
    stack = stack_factory(_config(start, {"b": []}))
    # A key that warns: vram is read only with gpus: auto.
    stack.write_config(_config(start, {"b": [], "d": []}, vram="8GiB"))
    check = subprocess.run(
        [PYTHON, "-m", "swapd.daemon.cli", "check-config", "-c", str(stack.config_path)],
        capture_output=True,
        text=True,
        env=stack.env,
        check=True,
    )
    warnings = [line for line in check.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2, check.stderr  # one on each of two models
    reloaded = stack.swapd("reload")
    assert [line for line in reloaded.stderr.splitlines()] == warnings
    assert reloaded.stdout.startswith("reloaded ")


def test_a_rejected_reload_prints_the_files_warnings_with_its_errors(stack_factory) -> None:
    # Issue 41: the warnings (a typo the user meets next) were dropped with the refusal.
    start = free_port_range(4)
    stack = stack_factory(_config(start, {"b": []}))
    bad = _config(start, {"b": [], "d": []}, vram="8GiB")
    bad["healthCheckTimeout"] = "ten"  # an error: the file is refused
    stack.write_config(bad)
    check = subprocess.run(
        [PYTHON, "-m", "swapd.daemon.cli", "check-config", "-c", str(stack.config_path)],
        capture_output=True,
        text=True,
        env=stack.env,
    )
    assert check.returncode == 1
    warnings = [line for line in check.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2, check.stderr
    reloaded = stack.swapd("reload", check=False)
    assert reloaded.returncode == 1
    lines = reloaded.stderr.splitlines()
    assert lines[: len(warnings)] == warnings  # first, as check-config prints them
    assert lines[len(warnings)].startswith("swapd: ") and "healthCheckTimeout" in reloaded.stderr
    assert not reloaded.stdout


@pytest.mark.parametrize("misspelt", ["apikeys", "api_keys"])
def test_a_misspelt_api_keys_is_refused_and_the_keys_stay(stack_factory, misspelt: str) -> None:
    """A near miss of `apiKeys` was a warning, so a reload applied a config with no key and a
    request that got 401 got 200 (issue 40, item 1): the reload fails, the old keys stay."""
    start = free_port_range(1)
    keyed = {**_config(start, {"b": []}), "apiKeys": ["sk-reload-key"]}
    stack = stack_factory(keyed)
    assert http_get(stack.url + "/v1/models")[0] == 401
    stack.write_config({**_config(start, {"b": []}), misspelt: ["sk-reload-key"]})
    refused = stack.swapd("reload", check=False)
    assert refused.returncode == 1, refused
    assert f"unknown key '{misspelt}'; did you mean 'apiKeys'?" in refused.stderr, refused.stderr
    assert "near miss of a security key" in refused.stderr
    assert http_get(stack.url + "/v1/models")[0] == 401
