"""A stub `pynvml` that keeps the real module's error classes and fakes only the driver calls (this
machine has no GPU and no NVML library)."""

from __future__ import annotations

import types
from typing import Any

import pynvml


class StubNvml(types.ModuleType):
    """Stands for nvidia-ml-py on a host with two GPUs and an old driver (no _v3 symbol)."""

    def __init__(self, init_error: Exception | None = None, old_driver: bool = True) -> None:
        super().__init__("pynvml")
        for name in dir(pynvml):
            if name.startswith(("NVMLError", "NVML_")):
                setattr(self, name, getattr(pynvml, name))
        self.init_error = init_error
        self.old_driver = old_driver
        self.calls: list[str] = []
        self.compute = {0: [(100, 5 * 2**30)], 1: [(200, None), (300, 2**30)]}
        self.graphics = {0: [(100, 5 * 2**30)], 1: [(400, 2**20)]}

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-stub-{handle}"

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA H100" if handle == 0 else b"NVIDIA L4"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(total=80 * 2**30, used=(handle + 1) * 2**30, free=0)

    @staticmethod
    def _procs(listed: list[tuple[int, int | None]]) -> list[Any]:
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in listed]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        if self.old_driver:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._procs(self.compute[handle])

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: int) -> list[Any]:
        self.calls.append("compute_v2")
        return self._procs(self.compute[handle])

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[Any]:
        return self._procs(self.graphics[handle])
