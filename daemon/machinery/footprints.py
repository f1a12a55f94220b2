"""What each model really holds on the GPUs: NVML's per-process memory, summed over the model's
processes, its peak per GPU kept and persisted across restarts (`footprints.json` in the state
directory).

A model's processes are its process tree, plus, for a container model (one with `cmdStop`, whose
container's processes are not the daemon's descendants), the GPU processes whose cgroup names a
container (docker, podman, containerd) on a GPU where that model is the only container model.
Memory on a GPU that no model's process holds is *foreign*: it counts as used by placement and is
named in its reasons.

The footprint belongs to one definition of the model (`definition_hash`): a changed `cmd`, `env`
or port starts learning afresh.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .gpu_backend import GpuProcess

log = logging.getLogger("swapd.footprints")

FILE_NAME = "footprints.json"
STATE_ENV = "STATE_DIRECTORY"  # what systemd's StateDirectory= sets
_CONTAINER = re.compile(r"(?:docker-|/docker/|libpod-|/libpod/|cri-containerd-)([0-9a-f]{12,64})")


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """systemd's `$STATE_DIRECTORY` (StateDirectory=swapd), else `$XDG_STATE_HOME/swapd`, else
    `~/.local/state/swapd`."""
    env = os.environ if environ is None else environ
    given = env.get(STATE_ENV)
    if given:
        return Path(given.split(":")[0])
    xdg = env.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "swapd"


@dataclass
class Learned:
    definition: str
    peak: dict[str, int] = field(default_factory=dict)  # GPU UUID -> bytes
    updated: float = 0.0

    def need(self) -> tuple[int, ...]:
        return tuple(sorted((b for b in self.peak.values() if b > 0), reverse=True))


@dataclass(frozen=True)
class Growth:
    model: str
    gpu: str
    before: int
    now: int


@dataclass(frozen=True)
class Usage:
    """One NVML reading: per model per GPU the bytes its processes hold, and the rest."""

    by_model: dict[str, dict[str, int]]
    foreign: dict[str, int]  # GPU UUID -> bytes held by no model's process
    foreign_holders: dict[str, list[str]]


def container_id(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    match = _CONTAINER.search(text)
    return match.group(1) if match else None


def _process_name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "?"


def attribute(
    procs: Iterable[GpuProcess],
    trees: Mapping[str, set[int]],
    containers: Mapping[str, set[str]],
) -> Usage:
    """Split NVML's process list among the models. `trees`: model -> pids of its process tree;
    `containers`: container model -> the GPU UUIDs (case-folded) it was placed on."""
    owner = {pid: model for model, pids in trees.items() for pid in pids}
    by_model: dict[str, dict[str, int]] = {}
    foreign: dict[str, int] = {}
    holders: dict[str, list[str]] = {}
    for proc in procs:
        used = proc.used_bytes or 0
        uuid = proc.gpu_uuid.casefold()
        model = owner.get(proc.pid)
        if model is None and containers:
            candidates = [m for m, gpus in containers.items() if uuid in gpus]
            if len(candidates) == 1 and container_id(proc.pid) is not None:
                model = candidates[0]
        if model is None:
            foreign[uuid] = foreign.get(uuid, 0) + used
            gib = used / 1024**3
            holders.setdefault(uuid, []).append(
                f"pid {proc.pid} ({_process_name(proc.pid)}) {gib:.1f} GiB"
            )
            continue
        per_gpu = by_model.setdefault(model, {})
        per_gpu[uuid] = per_gpu.get(uuid, 0) + used
    return Usage(by_model, foreign, holders)


class Footprints:
    """The learned peaks, by model id, read from and written to `path` (None: memory only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.models: dict[str, Learned] = {}
        self._dirty = False
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning(
                "cannot read learned GPU footprints from %s (%s): learning afresh", path, exc
            )
            return
        for model, item in (data.get("models") or {}).items():
            try:
                peak = {str(k).casefold(): int(v) for k, v in item["peak"].items()}
                self.models[model] = Learned(str(item["definition"]), peak, float(item["updated"]))
            except (KeyError, TypeError, ValueError, AttributeError):
                log.warning("%s: ignoring the malformed footprint of %s", path, model)
        log.info("learned GPU footprints of %d models read from %s", len(self.models), path)

    def learned(self, model: str, definition: str) -> Learned | None:
        item = self.models.get(model)
        return item if item is not None and item.definition == definition and item.peak else None

    def observe(self, model: str, definition: str, use: Mapping[str, int]) -> list[Growth]:
        """Fold one reading of the model's use into its peaks; returns what grew."""
        item = self.models.get(model)
        if item is None or item.definition != definition:
            item = self.models[model] = Learned(definition)
        grown = []
        for gpu, now in use.items():
            before = item.peak.get(gpu, 0)
            if now > before:
                item.peak[gpu] = now
                grown.append(Growth(model, gpu, before, now))
        if grown:
            item.updated = time.time()
            self._dirty = True
        return grown

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        data = {
            "version": 1,
            "models": {
                m: {"definition": i.definition, "peak": i.peak, "updated": i.updated}
                for m, i in sorted(self.models.items())
            },
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".footprints.")
            with os.fdopen(fd, "w") as out:
                json.dump(data, out, indent=1)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot write learned GPU footprints to %s: %s", self.path, exc)
            with contextlib.suppress(OSError, UnboundLocalError):
                os.unlink(tmp)
            return
        self._dirty = False
