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


class GpuBackend(Protocol):
    name: str

    def devices(self) -> list[GpuInfo]: ...

    def processes(self) -> list[GpuProcess]: ...

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

    def close(self) -> None:
        pass
