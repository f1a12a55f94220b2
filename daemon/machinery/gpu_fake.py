"""A GPU backend that stands for NVML on machines without a GPU (tests, demos).

Chosen with `SWAPD_GPU_BACKEND=fake`. Its devices come from `SWAPD_FAKE_GPUS`: a count ("2") or a
JSON list whose items are a name or an object {"name", "uuid", "total_bytes"}. Its processes are
the host's real ones: every live process whose environment has `CUDA_VISIBLE_DEVICES` naming a fake
device (by index or UUID) is listed on that device, holding `SWAPD_FAKE_GPU_MEM` bytes (read from
that process's own environment, default 1 GiB); a process with `SWAPD_FAKE_GPU_MEM` but no
`CUDA_VISIBLE_DEVICES` sees every device, as a CUDA process would. So a model the daemon starts
with `gpus` appears on its GPUs while it runs and disappears when it exits, exactly as NVML would
show it; a process that ignores SIGTERM lingers as it would on a real GPU.

A process may declare its own use instead, as a real CUDA process's use changes while it runs:
when its environment has `SWAPD_FAKE_GPU_MEM_DIR`, the file `<that dir>/<its pid>` holds its
bytes (tests/support/upstreams/fake_model.py `--gpu-mem`, and `POST /gpu-mem?bytes=N` to grow).

A process the CUDA checkpoint stand-in (`cuda_fake.py`) has checkpointed is listed on no device,
as NVML lists a checkpointed process nowhere (its state file is in `SWAPD_FAKE_CUDA_DIR`, read from
the process's own environment).

Several swapd instances (parallel test runs) share one /proc. When `SWAPD_FAKE_GPU_SCOPE` is set,
only processes whose environment carries the same value count, and the daemon passes its
environment on to the models it starts, so each instance sees only its own models.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from ...ipc.model_status import GpuInfo
from ..errors import GpuError
from .cuda_backend import ProcessState
from .cuda_fake import DIR_ENV as CUDA_DIR_ENV
from .cuda_fake import read_state
from .fake_footprint import MEM_ENV, declared_memory
from .gpu_backend import GpuProcess, GpuTelemetry

CUDA_ENV = "CUDA_VISIBLE_DEVICES"
GPUS_ENV = "SWAPD_FAKE_GPUS"
SCOPE_ENV = "SWAPD_FAKE_GPU_SCOPE"
DEFAULT_COUNT = 2
DEFAULT_TOTAL = 80 * 1024**3


def fake_uuid(index: int) -> str:
    return f"GPU-00000000-0000-4000-8000-{index:012d}"


def _parse_devices(text: str | None) -> list[tuple[str, str, int]]:
    if text is None or not text.strip():
        return [(f"Fake GPU {i}", fake_uuid(i), DEFAULT_TOTAL) for i in range(DEFAULT_COUNT)]
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GpuError(f"{GPUS_ENV}: expected a count or a JSON list, got {text!r}") from exc
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return [(f"Fake GPU {i}", fake_uuid(i), DEFAULT_TOTAL) for i in range(value)]
    if not isinstance(value, list):
        raise GpuError(f"{GPUS_ENV}: expected a count or a JSON list, got {text!r}")
    devices = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            raise GpuError(f"{GPUS_ENV}[{i}]: expected a name or an object, got {item!r}")
        devices.append(
            (
                str(item.get("name", f"Fake GPU {i}")),
                str(item.get("uuid", fake_uuid(i))),
                int(item.get("total_bytes", DEFAULT_TOTAL)),
            )
        )
    return devices


def _read_environ(pid_dir: Path) -> dict[str, str] | None:
    try:
        raw = (pid_dir / "environ").read_bytes()
    except OSError:  # gone, or another user's process
        return None
    env = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _is_zombie(pid_dir: Path) -> bool:
    # A zombie has released everything, its GPU contexts included; NVML no longer lists it.
    try:
        stat = (pid_dir / "stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2 :].startswith(("Z", "X"))


class FakeBackend:
    name = "fake"

    def __init__(
        self,
        devices: list[tuple[str, str, int]],
        scope: str | None = None,
        proc: Path = Path("/proc"),
    ) -> None:
        self._devices = devices
        self._scope = scope or None
        self._proc = proc

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> FakeBackend:
        env = os.environ if environ is None else environ
        return cls(_parse_devices(env.get(GPUS_ENV)), env.get(SCOPE_ENV))

    def _device_index(self, spec: str) -> int | None:
        text = spec.strip()
        if text.isdecimal():
            index = int(text)
            return index if index < len(self._devices) else None
        for index, (_, uuid, _) in enumerate(self._devices):
            if uuid.casefold() == text.casefold():
                return index
        return None

    def processes(self) -> list[GpuProcess]:
        result = []
        own = os.getpid()
        for pid_dir in self._proc.iterdir():
            if not pid_dir.name.isdecimal() or int(pid_dir.name) == own:
                continue
            env = _read_environ(pid_dir)
            if not env or not (CUDA_ENV in env or MEM_ENV in env):
                continue
            if self._scope is not None and env.get(SCOPE_ENV) != self._scope:
                continue
            if _is_zombie(pid_dir):
                continue
            cuda = env.get(CUDA_DIR_ENV)
            if cuda and read_state(cuda, pid_dir.name) is ProcessState.CHECKPOINTED:
                continue
            used = declared_memory(env, pid_dir.name)
            if CUDA_ENV in env:
                indices = {self._device_index(s) for s in env[CUDA_ENV].split(",")}
            else:
                indices = set(range(len(self._devices)))
            for index in sorted(i for i in indices if i is not None):
                result.append(
                    GpuProcess(
                        gpu_index=index,
                        gpu_uuid=self._devices[index][1],
                        pid=int(pid_dir.name),
                        used_bytes=used,
                    )
                )
        return result

    def devices(self) -> list[GpuInfo]:
        used = [0] * len(self._devices)
        for proc in self.processes():
            used[proc.gpu_index] += proc.used_bytes or 0
        return [
            GpuInfo(
                index=i,
                uuid=uuid,
                name=name,
                total_bytes=total,
                used_bytes=min(used[i], total),
                free_bytes=max(total - used[i], 0),
            )
            for i, (name, uuid, total) in enumerate(self._devices)
        ]

    def telemetry(self) -> list[GpuTelemetry]:
        """Figures that follow what runs on each fake device, as a real one's would: idle, cool
        and quiet while nothing holds memory there; busy, warmer and drawing more while
        something does."""
        out = []
        for info in self.devices():
            busy = info.used_bytes > 0
            out.append(
                GpuTelemetry(
                    index=info.index,
                    uuid=info.uuid,
                    name=info.name,
                    temp_c=70 if busy else 35,
                    gpu_util_pct=100.0 if busy else 0.0,
                    mem_used_bytes=info.used_bytes,
                    mem_total_bytes=info.total_bytes,
                    fan_speed_pct=60.0 if busy else 30.0,
                    power_draw_w=300.0 if busy else 60.0,
                    vendor="NVIDIA",
                    driver_version="fake",
                    power_limit_w=700.0,
                )
            )
        return out

    def close(self) -> None:
        pass
