"""`swapd check-config` as a user runs it: the installed console command, exit codes, output."""

from __future__ import annotations

import importlib.metadata
import re
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from swapd.ipc.build_info import checkout_commit
from tests.support.cli import CONFIGS, swapd


def test_good_file_exits_0_with_a_summary() -> None:
    result = swapd("check-config", "-c", str(CONFIGS / "seed_comfyui_auto.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK: 1 model"
    assert result.stderr == ""


def test_bad_file_exits_1_with_every_error_on_stderr(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "models:\n"
        "  comfyui_auto:\n"
        "    cmd: comfy --port ${PORT}\n"
        "    ttl: ten\n"
        "    chekEndpoint: /\n"
        "upstream:\n"
        "  ignorePaths: ['(']\n"
    )
    result = swapd("check-config", "-c", str(config))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    # An unknown key is a warning (llama-swap ignores it), listed before the errors.
    assert lines[0] == (
        f"warning: {config}:5 models.comfyui_auto.chekEndpoint: unknown key 'chekEndpoint'; "
        "did you mean 'checkEndpoint'? (ignored, as llama-swap ignores it)"
    )
    assert lines[1] == f"{config}:4 models.comfyui_auto.ttl: expected an integer, got 'ten'"
    assert lines[2].startswith(f"{config}:7 upstream.ignorePaths[0]: invalid regular expression")
    assert lines[3] == f"{config}: 2 errors, config not usable"
    # --strict: the unknown key is an error among the others, in line order.
    result = swapd("check-config", "--strict", "-c", str(config))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[1] == (
        f"{config}:5 models.comfyui_auto.chekEndpoint: unknown key 'chekEndpoint'; "
        "did you mean 'checkEndpoint'?"
    )
    assert lines[3] == f"{config}: 3 errors, config not usable"


@pytest.mark.parametrize("kind", ["missing", "directory", "binary"])
def test_unreadable_file_exits_1_with_a_clear_message(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "config.yaml"
    if kind == "directory":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"\xff\xfe\x00models")
    result = swapd("check-config", "-c", str(path))
    assert result.returncode == 1
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"{path}: cannot read config file: ")
    assert "Traceback" not in result.stderr


def test_warnings_go_to_stderr_and_do_not_fail(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("logRequests: true\nmodels:\n  m:\n    cmd: srv --port ${PORT}\n")
    result = swapd("check-config", "-c", str(config))
    assert result.returncode == 0
    assert result.stdout.strip() == "OK: 1 model, 1 warning"
    assert result.stderr.strip() == (
        f"warning: {config}:1 logRequests: llama-swap key accepted but ignored by swapd "
        "(deprecated in llama-swap too)"
    )


def test_print_shows_the_resolved_config_with_forced_settings_marked(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "healthCheckTimeout: 5\n"
        "apiKeys: [sk-very-secret]\n"
        "macros:\n  img: comfy:latest\n"
        "models:\n"
        "  comfyui_auto:\n"
        "    cmd: docker run -p ${PORT}:8188 ${img}\n"
        "    concurrencyLimit: 20\n"
        "  'org/m:q4':\n"
        "    cmd: srv --port ${PORT}\n"
        "    checkEndpoint: none\n"
    )
    result = swapd("check-config", "-c", str(config), "--print")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "sk-very-secret" not in out
    assert "concurrencyLimit: 999  # forced: comfyui_auto: the per-model default is 10" in out
    assert "  ignoreWebsockets: true  # forced: comfyui_auto: a websocket connection" in out
    assert "healthCheckTimeout: 15  # forced: healthCheckTimeout is never below 15 s" in out
    resolved = yaml.safe_load(out)  # the output is itself YAML
    comfy = resolved["models"]["comfyui_auto"]
    assert comfy["cmd"] == ["docker", "run", "-p", "5800:8188", "comfy:latest"]
    assert comfy["proxy"] == "http://localhost:5800"
    assert comfy["checkEndpoint"] == "/health"
    assert comfy["concurrencyLimit"] == 999
    other = resolved["models"]["org/m:q4"]
    assert other["port"] == 5801 and other["checkEndpoint"] == "none"
    assert resolved["apiKeys"] == ["(hidden)"]
    # llama-swap's default without its leading `.*`: the same paths match under re.search.
    assert resolved["upstream"]["ignorePaths"] == [r"\.(js|json|css|png|gif|jpg|jpeg|ico|txt)$"]
    assert "OK: 2 models" in result.stderr


def test_help_explains_check_config() -> None:
    result = swapd("check-config", "--help")
    assert result.returncode == 0
    assert "--print" in result.stdout and "-c CONFIG" in result.stdout


def test_swapd_python_is_set_as_swapd_run_sets_it(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("models:\n  m:\n    cmd: ${env.SWAPD_PYTHON} -m srv --port ${PORT}\n")
    result = swapd("check-config", "-c", str(config), "--print")
    assert result.returncode == 0, result.stderr
    cmd = yaml.safe_load(result.stdout)["models"]["m"]["cmd"]
    assert Path(cmd[0]).name.startswith("python")


def test_version_is_llama_swaps_line_with_the_package_version() -> None:
    """`version: X (commit), built at DATE`: the checkout's commit (this test runs in one) and
    the install's date, as `GET /api/version` has them."""
    result = swapd("--version")
    version = importlib.metadata.version("swapd")
    commit = checkout_commit(Path(__file__).resolve())
    assert result.returncode == 0 and commit
    line = re.fullmatch(
        rf"version: {re.escape(version)} \((\w+)\), built at (\S+)\n", result.stdout
    )
    assert line is not None, result.stdout
    assert line.group(1) == commit
    assert datetime.fromisoformat(line.group(2).replace("Z", "+00:00")).year >= 2024
