"""What a GPU backend is (`GpuBackend`), what it reports (`GpuProcess`), and `NullBackend`, the
backend of a host without NVML. The real backends (`gpu_nvml.py`, `gpu_fake.py`) implement it;
`gpu.py` chooses one."""

from __future__ import annotations

from typing import Protocol

import msgspec

from ...ipc.model_status import GpuInfo


class GpuProcess(msgspec.Struct, frozen=True):
    """One process holding memory on one GPU, as NVML lists it."""

    gpu_index: int
    gpu_uuid: str
    pid: int
    used_bytes: int | None  # None where NVML cannot tell (e.g. no permission, WDDM)


class GpuTelemetry(msgspec.Struct, frozen=True):
    """One GPU's figures of the moment, for the performance sampler (`/api/performance`,
    llama-swap's `llamaswap_gpu_*` series), and the facts `/api/hardware` lists. A figure the
    device does not report (no fan on a passive card) is 0, as llama-swap reports it."""

    index: int
    uuid: str
    name: str
    temp_c: int = 0
    vram_temp_c: int = 0
    gpu_util_pct: float = 0.0
    mem_used_bytes: int = 0
    mem_total_bytes: int = 0
    fan_speed_pct: float = 0.0
    power_draw_w: float = 0.0
    vendor: str = ""
    architecture: str = ""
    driver_version: str = ""
    power_limit_w: float = 0.0


class GpuBackend(Protocol):
    name: str

    def devices(self) -> list[GpuInfo]: ...

    def processes(self) -> list[GpuProcess]: ...

    def telemetry(self) -> list[GpuTelemetry]: ...

    def close(self) -> None: ...


class NullBackend:
    """No NVML: no devices, no processes. `reason` says why; `broken` = present but failing."""

    name = "none"

    def __init__(self, reason: str, *, broken: bool = False) -> None:
        self.reason = reason
        self.broken = broken

    def devices(self) -> list[GpuInfo]:
        return []

    def processes(self) -> list[GpuProcess]:
        return []

    def telemetry(self) -> list[GpuTelemetry]:
        return []

    def close(self) -> None:
        pass
