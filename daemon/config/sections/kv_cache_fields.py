"""`kvCache`: a model's conversation caches (llama.cpp's KV slots) saved to files before its
process stops or sleeps, and restored after it starts or wakes (docs/guides/kv-cache.md).

Written as a preset name (`kvCache: llama.cpp`), as a preset with its timeout changed
(`kvCache: {preset: llama.cpp, timeout: 60}`), or in full, naming the three calls a server with
such an API answers: `list` (its slots, as llama.cpp's `GET /slots` lists them), `save` and
`restore` (one slot to or from a file), each `"METHOD /path"` or `{endpoint, method, body}`;
`{id}` in an endpoint or body is the slot's id, `{file}` the file's name. `timeout` bounds a
whole save and a whole restore (all slots), seconds.

The top level's `kvCacheDir` holds a folder per model (its `${KV_DIR}`, which the model's `cmd`
passes to the server: llama-server's `--slot-save-path ${KV_DIR}`), and `kvCacheBudget` the MB
they may take together.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path as FsPath
from typing import Any

from ....ipc.routing_table import HttpCall
from ....ipc.watcher_names import PREFIX, watcher_name
from .. import shape
from ..floor.issues import Report, describe
from ..floor.presets import Presets
from ..floor.yaml_nodes import Path
from ..model import KvCacheSetting
from .sleep_calls import read_method_and_body, written_out

KEY = "kvCache"
MACRO = "KV_DIR"
DEFAULT_TIMEOUT = 30.0
_FILE_BODY = json.dumps({"filename": "{file}"})

# llama-server with `--slot-save-path DIR` (tools/server/README.md, "POST /slots/{id_slot}").
_LLAMA_CPP = KvCacheSetting(
    list=HttpCall("/slots", method="GET", timeout=DEFAULT_TIMEOUT),
    save=HttpCall("/slots/{id}?action=save", body=_FILE_BODY, timeout=DEFAULT_TIMEOUT),
    restore=HttpCall("/slots/{id}?action=restore", body=_FILE_BODY, timeout=DEFAULT_TIMEOUT),
    dir="",
    preset="llama.cpp",
)
PRESETS: dict[str, KvCacheSetting] = {"llama.cpp": _LLAMA_CPP, "llamacpp": _LLAMA_CPP}
WRITTEN = Presets(PRESETS, shape.KvCacheMapping)


def root(value: str | None, source: str, environ: Mapping[str, str]) -> str:
    """`kvCacheDir`, absolute (against the config file's folder); unset: the user's cache."""
    if value and value.strip():
        path = FsPath(value.strip()).expanduser()
        if not path.is_absolute():
            base = FsPath(source).parent if source and FsPath(source).exists() else FsPath.cwd()
            path = base / path
        return str(path)
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".cache"
    )
    return os.path.join(cache, "swapd", "kv")


def model_dir(kv_root: str, model_id: str) -> str:
    """The model's `${KV_DIR}`: a folder of `kvCacheDir` named for its id (a safe, reversible
    name: ids may hold `/ : .`)."""
    return os.path.join(kv_root, watcher_name(model_id)[len(PREFIX) :])


def read_kv_cache(
    value: str | shape.KvCacheMapping | None,
    body: Mapping[str, Any],
    path: Path,
    report: Report,
    kv_root: str,
    model_id: str,
) -> KvCacheSetting | None:
    """The model's kvCache setting, `value` as typed by its declaration (None when it has none,
    or after a type error); problems go to `report`."""
    if value is None:
        return None
    where = (*path, KEY)
    if isinstance(value, str):
        setting = WRITTEN.named(value, where, report)
    else:
        setting = _mapping(value, where, report)
    if setting is None:
        return None
    folder = model_dir(kv_root, model_id)
    cmd, env = body.get("cmd"), body.get("env")
    words = [cmd if isinstance(cmd, str) else "", *(env if isinstance(env, list) else [])]
    if folder not in " ".join(str(word) for word in words):
        report.warn(
            where,
            "the server is never told where the files go: its cmd does not use ${KV_DIR} "
            "(llama-server: --slot-save-path ${KV_DIR}), so its saves and restores fail",
        )
    return KvCacheSetting(
        list=setting.list,
        save=setting.save,
        restore=setting.restore,
        dir=folder,
        preset=setting.preset,
    )


def _mapping(value: shape.KvCacheMapping, where: Path, report: Report) -> KvCacheSetting | None:
    """The mapping form, its keys typed by `typed.py` (which reported each wrong one): read in
    this order, the reading stops at the first such key, as at its own first problem."""
    ok, base = WRITTEN.base(value.preset, where, report)
    if not ok or report.typed_wrong((*where, "timeout")):
        return None
    timeout = value.timeout
    if timeout is not None and not 0 < timeout < float("inf"):
        report.error((*where, "timeout"), f"expected seconds above 0, got {describe(timeout)}")
        return None
    seconds = float(timeout) if timeout is not None else DEFAULT_TIMEOUT
    calls: dict[str, HttpCall] = {}
    written = {"list": value.list_call, "save": value.save, "restore": value.restore}
    for name, method in (("list", "GET"), ("save", "POST"), ("restore", "POST")):
        item = written[name]
        if item is None and report.typed_wrong((*where, name)):
            return None
        if item is None:
            if base is None:
                report.error(where, f"needs {name} (the call that {_WHAT[name]}) or a preset")
                return None
            calls[name] = _timed(getattr(base, name), seconds)
            continue
        call = _call(item, (*where, name), report, method, name != "list")
        if call is None:
            return None
        calls[name] = _timed(call, seconds)
    return KvCacheSetting(**calls, dir="", preset=None)


_WHAT = {
    "list": "lists the slots",
    "save": "saves a slot to a file",
    "restore": "restores a slot from a file",
}


def _timed(call: HttpCall, seconds: float) -> HttpCall:
    return HttpCall(call.endpoint, method=call.method, body=call.body, timeout=seconds)


def _call(
    item: str | shape.KvCall, where: Path, report: Report, method: str, file: bool
) -> HttpCall | None:
    item = written_out(item, shape.KvCall)
    if report.typed_wrong((*where, "endpoint")):
        return None
    endpoint = item.endpoint
    if endpoint is None or not endpoint.strip().startswith("/"):
        report.error(where, f"expected a path on the model's own server, got {describe(endpoint)}")
        return None
    read = read_method_and_body(item, method, where, report)
    if read is None:
        return None
    verb, body = read
    if body is None and file:
        body = _FILE_BODY
    text = f"{endpoint} {body or ''}"
    if file and "{file}" not in text:
        report.error(where, "names no {file}: the server would not know which file to use")
        return None
    if "{id}" not in text and file:
        report.error(where, "names no {id}: the server would not know which slot")
        return None
    return HttpCall(endpoint.strip(), method=verb, body=body or "")
