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

    # The sampler's figures (`telemetry`): GPU 0 is a passive datacenter card (no fan) whose
    # memory temperature NVML reports; GPU 1 reports a fan and no memory temperature.

    def nvmlSystemGetDriverVersion(self) -> str:
        return "560.35.03"

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return 41 + handle

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return types.SimpleNamespace(gpu=87 if handle == 0 else 0, memory=12)

    def nvmlDeviceGetFanSpeed(self, handle: int) -> int:
        if handle == 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 33

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 412_500 if handle == 0 else 16_000  # milliwatts

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return 700_000 if handle == 0 else 72_000

    def nvmlDeviceGetArchitecture(self, handle: int) -> int:
        return int(pynvml.NVML_DEVICE_ARCH_HOPPER if handle == 0 else pynvml.NVML_DEVICE_ARCH_ADA)

    def nvmlDeviceGetFieldValues(self, handle: int, fields: list[int]) -> list[Any]:
        assert fields == [pynvml.NVML_FI_DEV_MEMORY_TEMP]
        ok = handle == 0
        value = types.SimpleNamespace(uiVal=52, siVal=52)
        return [
            types.SimpleNamespace(
                nvmlReturn=pynvml.NVML_SUCCESS if ok else pynvml.NVML_ERROR_NOT_SUPPORTED,
                valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                value=value,
            )
        ]
