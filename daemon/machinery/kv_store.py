"""The files of the models' saved conversation caches (`kvCache`, docs/guides/kv-cache.md): swapd's
own, never another model's, and only for the definition that wrote them.

Each model has a folder under `kvCacheDir` (its `${KV_DIR}`, which its server writes into). A save
writes, per slot, `<key>-slot<id>.bin` and then `<key>.json`, the manifest that says which slots
it holds, how many tokens each and how many bytes; a restore reads only the manifest of the key of
the model's definition now. The key hashes what decides whether a cache fits the server: its
`cmd` (the model file, `n_ctx`, `-np`, the cache types; the port left out, as a reallocated port
changes nothing), its `env`, and the model file's size and modification time. Files of another key
are unusable: they are removed at the next save, at a reload and at the daemon's start, as are
the folders of models no longer in the config. `kvCacheBudget` bounds all models' files
together: the oldest manifests go first. Only names of this form are ever removed, so a folder
the operator shares with other files keeps them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from ..config import ModelConfig

# What a save must leave free on the disk beyond what the model's last save took (bytes);
# SWAPD_KV_RESERVE_BYTES sets another (a test stands a full disk in with a large one).
RESERVE_ENV = "SWAPD_KV_RESERVE_BYTES"
DEFAULT_RESERVE = 256 * 1024 * 1024
_OURS = re.compile(r"^[0-9a-f]{16}(\.json|-slot\d+\.bin)$")
_MODEL_FLAGS = ("-m", "--model")


class SavedSlot(msgspec.Struct, frozen=True):
    id: int
    file: str
    tokens: int
    bytes: int


class Manifest(msgspec.Struct, frozen=True):
    key: str
    saved_at: float  # wall clock
    slots: tuple[SavedSlot, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.slots)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.slots)


def definition_key(model: ModelConfig) -> str:
    """The hash of what makes a saved cache fit this model's server (16 hex digits)."""
    port = str(model.port) if model.port is not None else None
    argv = [arg for arg in model.cmd if arg != port]
    files = []
    for flag, value in zip(model.cmd, model.cmd[1:], strict=False):
        if flag in _MODEL_FLAGS:
            with contextlib.suppress(OSError):
                st = os.stat(value)
                files.append((value, st.st_size, st.st_mtime_ns))
    relevant = (argv, sorted(model.env.items()), files)
    return hashlib.sha256(msgspec.json.encode(relevant)).hexdigest()[:16]


def slot_file(key: str, slot: int) -> str:
    return f"{key}-slot{slot}.bin"


def read_manifest(folder: Path, key: str) -> Manifest | None:
    try:
        return msgspec.json.decode((folder / f"{key}.json").read_bytes(), type=Manifest)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def write_manifest(folder: Path, manifest: Manifest) -> None:
    path = folder / f"{manifest.key}.json"
    part = path.with_suffix(".json.part")
    part.write_bytes(msgspec.json.encode(manifest))
    os.replace(part, path)


def keep_only(folder: Path, manifest: Manifest | None) -> None:
    """Remove every file of ours in `folder` that `manifest` does not name (other keys' files,
    slots not saved this time)."""
    kept = (
        set() if manifest is None else {f"{manifest.key}.json", *(s.file for s in manifest.slots)}
    )
    for entry in _ours(folder):
        if entry.name not in kept:
            entry.unlink(missing_ok=True)


def prepare(folder: Path, key: str) -> tuple[bool, int]:
    """Before a save: the folder made, and whether the disk has room for what the model's last
    save of this definition took (and the reserve); what it has free."""
    folder.mkdir(parents=True, exist_ok=True)
    last = read_manifest(folder, key)
    return room_for(folder, last.bytes if last is not None else 0)


def room_for(folder: Path, expected: int) -> tuple[bool, int]:
    """Whether the disk holding `folder` has `expected` bytes free beyond the reserve; and what
    it has free."""
    reserve = int(os.environ.get(RESERVE_ENV) or DEFAULT_RESERVE)
    free = shutil.disk_usage(folder).free
    return free >= expected + reserve, free


def enforce_budget(root: Path, budget: int) -> list[Path]:
    """Remove the oldest models' saves until all of them take at most `budget` bytes; the folders
    whose save was removed."""
    saves = []
    for folder in _folders(root):
        for entry in folder.glob("*.json"):
            if not _OURS.match(entry.name):
                continue
            manifest = read_manifest(folder, entry.stem)
            if manifest is not None:
                saves.append((manifest.saved_at, folder, manifest))
    total = sum(m.bytes for _, _, m in saves)
    removed = []
    for _, folder, manifest in sorted(saves, key=lambda s: s[0]):
        if total <= budget:
            break
        remove_save(folder, manifest)
        total -= manifest.bytes
        removed.append(folder)
    return removed


def remove_save(folder: Path, manifest: Manifest) -> None:
    (folder / f"{manifest.key}.json").unlink(missing_ok=True)
    for slot in manifest.slots:
        (folder / slot.file).unlink(missing_ok=True)


def prune(root: Path, current: dict[Path, str]) -> None:
    """At a reload or the daemon's start: in each model folder under `root`, the files of any key
    but the model's current one (`current`: folder -> key) go, and so do the folders of models
    that have none (removed from the config, or without kvCache now)."""
    for folder in _folders(root):
        key = current.get(folder)
        keep_only(folder, read_manifest(folder, key) if key is not None else None)
        if key is None:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when nothing else is left in it


def _folders(root: Path) -> Iterable[Path]:
    try:
        return [p for p in root.iterdir() if p.is_dir()]
    except OSError:
        return []


def _ours(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if _OURS.match(p.name)]
    except OSError:
        return []


def age(manifest: Manifest) -> float:
    return max(0.0, time.time() - manifest.saved_at)


@dataclass(frozen=True)
class Moved:
    """What a save or a restore did: its seconds and bytes, the slots and their tokens."""

    seconds: float
    bytes: int
    slots: tuple[int, ...]
    tokens: int
