"""`--config-dir` without a stack: files merged in order by llama-swap's rules, each error at its
file and line, the sources llama-swap refuses, and `check-config` reading a directory."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from swapd.daemon.config import ConfigError, ConfigSources, load
from tests.support.stack import PYTHON

MODEL = "    cmd: srv --port ${PORT}\n    proxy: http://127.0.0.1:${PORT}\n"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _load(root: Path, file: str | None = "main.yaml", directory: str | None = "conf.d"):
    sources = ConfigSources(root / file if file else None, root / directory if directory else None)
    return load(sources, environ={"HOME_MODEL": "h"})


def _errors(root: Path, **kwargs: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _load(root, **kwargs)
    return [str(issue).replace(f"{root}/", "") for issue in caught.value.issues]


def test_files_merge_in_order_lists_accumulate_and_maps_merge(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "main.yaml": "startPort: 7000\napiKeys: [k1]\nmacros:\n  base: srv\n"
            "hooks:\n  on_startup:\n    preload: [a]\nmodels:\n  a:\n" + MODEL,
            # Sorted by name: 10 before 20; not the subdirectory, not other suffixes.
            "conf.d/20-c.yml": "apiKeys: [k3]\nstartPort: 7000\nmodels:\n  c:\n" + MODEL,
            "conf.d/10-b.yaml": "# comments only above the keys\napiKeys: [k2]\n"
            "models:\n  b:\n    cmd: ${base} --port ${PORT}\n    proxy: http://127.0.0.1:${PORT}\n",
            "conf.d/30-empty.yaml": "# nothing here\n",
            "conf.d/notes.txt": "models: {x: {cmd: nope}}\n",
            "conf.d/sub/40-deep.yaml": "models:\n  deep:\n" + MODEL,
        },
    )
    config = _load(tmp_path).config
    assert config.api_keys == ("k1", "k2", "k3")
    assert list(config.models) == ["a", "b", "c"]
    assert config.models["b"].cmd[0] == "srv"  # a global macro of another file
    assert [config.models[m].port for m in ("a", "b", "c")] == [7000, 7001, 7002]
    assert config.preload == ("a",)
    # The directory alone has no `base` macro: the error is at b's own file and line.
    assert _errors(tmp_path, file=None) == [
        "conf.d/10-b.yaml:5 models.b.cmd: unknown macro '${base}'"
    ]
    # An all-empty directory: no models, valid, as in llama-swap.
    _write(tmp_path, {"empty.d/a.yaml": "", "empty.d/b.yml": "# c\n"})
    assert _load(tmp_path, file=None, directory="empty.d").config.models == {}


def test_llama_swaps_conflicts_each_at_its_file_and_line(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "main.yaml": "startPort: 7000\nlogLevel: info\nmodels:\n  a:\n"
            + MODEL
            + "routing:\n  router:\n    settings:\n      groups:\n        g: {members: [a]}\n",
            "conf.d/1.yaml": "startPort: 7001\nlogLevel: info\n"
            "models:\n  b:\n"
            + MODEL
            + "  a:\n"
            + MODEL
            + "routing:\n  router:\n    settings:\n      groups:\n        g: {members: [b]}\n",
            "conf.d/2.yaml": "models: [oops]\nlogLevel: [debug]\n",
        },
    )
    assert _errors(tmp_path) == [
        'conf.d/1.yaml:1: conflict at "startPort": conf.d/1.yaml sets a different value than a '
        "previous source",
        'conf.d/1.yaml:7: duplicate models "a" found in conf.d/1.yaml (already defined in '
        "another config source)",
        'conf.d/1.yaml:14: duplicate groups "g" found in conf.d/1.yaml (already defined in '
        "another config source)",
        'conf.d/2.yaml:1: conflict at "models": expected a mapping, introduced by conf.d/2.yaml',
        'conf.d/2.yaml:2: conflict at "logLevel": incompatible YAML node kinds (kind 8 vs 2) '
        "introduced by conf.d/2.yaml",
    ]


def test_later_errors_name_the_file_and_line_they_are_in(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "main.yaml": "models:\n  a:\n" + MODEL,
            "conf.d/b.yaml": "\n\nmodels:\n  b:\n    cmd: |\n      srv --port ${PORT}\n"
            "      ${nope}\n    ttl: -5\n    chekEndpoint: /health\n",
            "conf.d/c.yaml": "models:\n  c:\n    cmd: [\n",
        },
    )
    # A file that does not parse is named with its line; the others are still read.
    assert _errors(tmp_path) == [
        "conf.d/c.yaml:4: YAML syntax error: while parsing a flow node expected the node "
        "content, but found '<stream end>'"
    ]
    (tmp_path / "conf.d/c.yaml").unlink()
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path)
    warnings = [str(w).replace(f"{tmp_path}/", "") for w in caught.value.warnings]
    assert "conf.d/b.yaml:9 models.b.chekEndpoint: unknown key 'chekEndpoint'; did you mean " \
        "'checkEndpoint'? (ignored, as llama-swap ignores it)" in warnings  # fmt: skip
    errors = _errors(tmp_path)
    assert "conf.d/b.yaml:7 models.b.cmd: unknown macro '${nope}'" in errors
    assert any(e.startswith("conf.d/b.yaml:8 models.b.ttl:") for e in errors), errors


def test_the_sources_llama_swap_refuses(tmp_path: Path) -> None:
    _write(tmp_path, {"conf.d/main.yaml": "models: {}\n"})
    assert _errors(tmp_path, file="conf.d/main.yaml") == [
        "conf.d/main.yaml: --config path conf.d/main.yaml is also present in --config-dir "
        "conf.d; remove it from one"
    ]
    assert _errors(tmp_path, file=None, directory="missing") == [
        "missing: --config-dir missing: No such file or directory"
    ]
    _write(tmp_path, {"none.d/readme.txt": "x"})
    assert _errors(tmp_path, file=None, directory="none.d") == [
        "none.d: no configuration sources found"
    ]
    assert _errors(tmp_path, file=None, directory=None) == [
        "swapd: at least one of --config or --config-dir must be provided"
    ]


def test_check_config_takes_a_config_dir(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {"conf.d/a.yaml": "models:\n  a:\n" + MODEL, "conf.d/b.yaml": "models:\n  b:\n" + MODEL},
    )
    command = [PYTHON, "-m", "swapd.daemon.cli", "check-config", "--config-dir"]
    result = subprocess.run([*command, str(tmp_path / "conf.d")], capture_output=True, text=True)
    assert (result.returncode, result.stdout.strip()) == (0, "OK: 2 models"), result.stderr
    bare = subprocess.run(command[:-1], capture_output=True, text=True)
    assert bare.returncode == 2 and "give -c FILE, --config-dir DIR, or both" in bare.stderr
