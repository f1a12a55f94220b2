"""The `kvCache` setting, `${KV_DIR}`, `kvCacheDir` and `kvCacheBudget`; and the files' key and
budget (machinery/kv_store.py): what makes a saved cache fit a server, and which saves go first."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from swapd.daemon.config.loader import ConfigError, Loaded, load_text
from swapd.daemon.machinery import kv_store
from swapd.daemon.machinery.kv_store import Manifest, SavedSlot
from swapd.ipc.routing_table import HttpCall


def _load(text: str, environ: dict[str, str] | None = None) -> Loaded:
    return load_text(textwrap.dedent(text).lstrip("\n"), "kv.yaml", environ=environ or {})


def _errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _load(text)
    return [str(issue) for issue in caught.value.issues]


def test_the_preset_fills_kv_dir_with_the_models_own_folder() -> None:
    loaded = _load(
        """
        kvCacheDir: /var/cache/kv
        kvCacheBudget: 100
        models:
          org/Gemma:3:
            cmd: llama-server --port ${PORT} --slot-save-path ${KV_DIR}
            kvCache: llama.cpp
          b:
            cmd: llama-server --port ${PORT}
        """
    )
    model = loaded.config.models["org/Gemma:3"]
    setting = model.kv_cache
    assert setting is not None and setting.preset == "llama.cpp"
    assert setting.dir == "/var/cache/kv/org_2f_47emma_3a3"  # watcher_names' safe, reversible form
    assert model.cmd[-1] == setting.dir
    assert setting.list == HttpCall("/slots", method="GET", timeout=30.0)
    assert setting.save.endpoint == "/slots/{id}?action=save"
    assert setting.restore.body == '{"filename": "{file}"}'
    assert loaded.config.models["b"].kv_cache is None
    assert (loaded.config.kv_cache_dir, loaded.config.kv_cache_budget) == ("/var/cache/kv", 100)
    assert loaded.warnings == ()


def test_the_default_folder_is_the_users_cache() -> None:
    text = "models:\n  a:\n    cmd: srv --port ${PORT} --dir ${KV_DIR}\n    kvCache: llamacpp\n"
    loaded = _load(text, {"HOME": "/home/u"})
    assert loaded.config.models["a"].cmd[-1] == "/home/u/.cache/swapd/kv/a"
    loaded = _load(text, {"XDG_CACHE_HOME": "/xdg"})
    assert loaded.config.kv_cache_dir == "/xdg/swapd/kv"


def test_the_written_out_form_and_a_timeout() -> None:
    loaded = _load(
        """
        models:
          a:
            cmd: srv --port ${PORT} --dir ${KV_DIR}
            kvCache:
              list: GET /cache/slots
              save: PUT /cache/{id}/{file}
              restore: {endpoint: "/cache/{id}/load", body: '{"name": "{file}"}'}
              timeout: 5
          b:
            cmd: srv --port ${PORT} --dir ${KV_DIR}
            kvCache: {preset: llama.cpp, timeout: 2}
        """
    )
    a = loaded.config.models["a"].kv_cache
    assert a is not None and a.preset is None
    assert a.list == HttpCall("/cache/slots", method="GET", timeout=5.0)
    # A save or restore written without a body sends llama.cpp's `{"filename": ...}`.
    assert a.save == HttpCall(
        "/cache/{id}/{file}", method="PUT", body='{"filename": "{file}"}', timeout=5.0
    )
    assert a.restore == HttpCall("/cache/{id}/load", body='{"name": "{file}"}', timeout=5.0)
    b = loaded.config.models["b"].kv_cache
    assert b is not None and b.save.timeout == b.restore.timeout == 2.0


def test_a_cmd_without_kv_dir_is_a_warning() -> None:
    loaded = _load("models:\n  a:\n    cmd: llama-server --port ${PORT}\n    kvCache: llama.cpp\n")
    (warning,) = loaded.warnings
    assert "models.a.kvCache" in str(warning) and "does not use ${KV_DIR}" in str(warning)


def test_the_errors_name_the_key() -> None:
    errors = _errors(
        """
        models:
          a:
            cmd: srv --port ${PORT} ${KV_DIR}
            kvCache: redis
          b:
            cmd: srv --port ${PORT} ${KV_DIR}
            kvCache: {list: GET /slots, save: POST /slots/save, restore: "POST /r/{id}/{file}"}
          c:
            cmd: srv --port ${PORT} ${KV_DIR}
            kvCache: {save: "POST /s/{id}/{file}"}
          d:
            cmd: srv --port ${PORT} --dir ${KV_DIR}
          e:
            cmd: srv --port ${PORT} ${KV_DIR}
            kvCache: {preset: llama.cpp, timeout: 0}
        """
    )
    text = "\n".join(errors)
    assert "models.a.kvCache" in text and "llama.cpp" in text
    assert "models.b.kvCache.save" in text and "names no {id}" in text
    assert "models.c.kvCache" in text and "needs list" in text
    assert "${KV_DIR} is only available when the model sets kvCache" in text
    assert "models.e.kvCache.timeout" in text


def test_kv_dir_is_a_reserved_macro_name() -> None:
    errors = _errors("macros:\n  KV_DIR: /x\nmodels:\n  a:\n    cmd: srv --port ${PORT}\n")
    assert any("KV_DIR" in e and "reserved" in e for e in errors)


def _model(cmd: str) -> object:
    text = f"models:\n  a:\n    cmd: {cmd}\n    kvCache: llama.cpp\n"
    return _load(text).config.models["a"]


def test_the_key_changes_with_the_context_and_the_model_file_not_the_port(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x" * 10)
    base = f"srv -m {gguf} --slot-save-path ${{KV_DIR}}"
    key = kv_store.definition_key(_model(f"{base} --port ${{PORT}} -c 4096"))  # type: ignore[arg-type]
    other_port = _load(
        f"startPort: 7000\nmodels:\n  a:\n    cmd: {base} --port ${{PORT}} -c 4096\n"
        "    kvCache: llama.cpp\n"
    ).config.models["a"]
    assert kv_store.definition_key(other_port) == key
    assert kv_store.definition_key(_model(f"{base} --port ${{PORT}} -c 2048")) != key  # type: ignore[arg-type]
    os.utime(gguf, (time.time() + 100, time.time() + 100))
    assert kv_store.definition_key(_model(f"{base} --port ${{PORT}} -c 4096")) != key  # type: ignore[arg-type]


def _save(folder: Path, key: str, saved_at: float, size: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    name = kv_store.slot_file(key, 0)
    (folder / name).write_bytes(b"x" * size)
    kv_store.write_manifest(folder, Manifest(key, saved_at, (SavedSlot(0, name, 10, size),)))


def test_the_budget_removes_the_oldest_saves_and_only_swapds_files(tmp_path: Path) -> None:
    _save(tmp_path / "a", "a" * 16, 100.0, 600)
    _save(tmp_path / "b", "b" * 16, 200.0, 600)
    _save(tmp_path / "c", "c" * 16, 300.0, 600)
    (tmp_path / "a" / "notes.txt").write_text("the operator's")
    assert kv_store.enforce_budget(tmp_path, 1300) == [tmp_path / "a"]
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["notes.txt"]
    assert kv_store.read_manifest(tmp_path / "b", "b" * 16) is not None
    # A reload: b's definition changed, c left the config.
    kv_store.prune(tmp_path, {tmp_path / "b": "d" * 16})
    assert list((tmp_path / "b").iterdir()) == [] and not (tmp_path / "c").exists()


def test_the_presets_are_the_declared_names() -> None:
    # `kvCache`'s type in config/shape.py names them (its error lists them).
    from typing import get_args

    from swapd.daemon.config.sections.kv_cache_fields import PRESETS
    from swapd.daemon.config.shape import KvCachePreset

    assert tuple(PRESETS) == get_args(KvCachePreset)
