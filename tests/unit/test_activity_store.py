"""`store.path` without a stack: its config checks, and a file SQLite cannot open leaves the
activity log in memory."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from swapd.daemon.config import Config
from swapd.daemon.config.loader import ConfigError, load_config_text
from swapd.daemon.observe.service import Observer


def _issues(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config_text(textwrap.dedent(text).lstrip("\n"), "config.yaml", environ={})
    return [str(issue) for issue in caught.value.issues]


def test_store_path_checks(tmp_path: Path) -> None:
    assert _issues(f"models: {{}}\nstore:\n  path: {tmp_path}\n") == [
        f"config.yaml:3 store.path: store.path {str(tmp_path)!r} is a directory; expected a file"
    ]
    assert _issues("models: {}\nstore:\n  path: ''\n") == [
        "config.yaml:3 store.path: store.path must not be empty"
    ]
    missing = tmp_path / "no" / "such" / "a.db"
    (found,) = _issues(f"models: {{}}\nstore:\n  path: {missing}\n")
    assert found.startswith("config.yaml:3 store.path: ") and "not writable" in found
    config = load_config_text(f"models: {{}}\nstore:\n  path: {tmp_path / 'a.db'}\n", "c.yaml")
    assert config.store_path == str(tmp_path / "a.db") and config.capture_buffer == 5


def test_a_file_sqlite_cannot_open_leaves_the_log_in_memory(tmp_path: Path) -> None:
    bad = tmp_path / "activity.db"
    bad.write_bytes(b"not a database" * 100)
    observer = Observer(Config(store_path=str(bad)), "i", None, lambda: (), None)  # type: ignore[arg-type]
    assert observer.db is None and observer.store.next_id == 1
    assert bad.read_bytes() == b"not a database" * 100  # left as it was
