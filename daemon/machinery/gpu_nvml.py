"""The NVML GPU backend (nvidia-ml-py's `pynvml`): inventory and per-process GPU memory."""

from __future__ import annotations

import threading
from typing import Any

from ...ipc.model_status import GpuInfo
from ..errors import GpuError
from .gpu_backend import GpuProcess, GpuTelemetry


def _text(value: str | bytes) -> str:
    # nvidia-ml-py decodes strings; very old releases returned bytes.
    return value.decode() if isinstance(value, bytes) else value


class NvmlBackend:
    name = "nvml"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # nvidia-ml-py is a dependency, but be clear if it is gone
            raise GpuError(f"NVML unavailable (nvidia-ml-py not installed: {exc})") from exc
        self._nvml: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            missing = isinstance(exc, pynvml.NVMLError_LibraryNotFound)
            raise GpuError(
                f"NVML unavailable ({type(exc).__name__}: {exc})", library_missing=missing
            ) from exc
        self._closed = False
        self._lock = threading.Lock()
        try:
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._uuids = [_text(pynvml.nvmlDeviceGetUUID(h)) for h in self._handles]
            self._names = [_text(pynvml.nvmlDeviceGetName(h)) for h in self._handles]
        except pynvml.NVMLError as exc:
            self.close()
            raise GpuError(f"NVML inventory failed ({type(exc).__name__}: {exc})") from exc

    def devices(self) -> list[GpuInfo]:
        nvml = self._nvml
        result = []
        for index, handle in enumerate(self._handles):
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                total, used, free = int(mem.total), int(mem.used), int(mem.free)
            except nvml.NVMLError_NotSupported:
                total = used = free = 0  # integrated/unified-memory parts report no framebuffer
            except nvml.NVMLError as exc:
                raise GpuError(f"NVML memory info of GPU {index} failed: {exc}") from exc
            result.append(
                GpuInfo(
                    index=index,
                    uuid=self._uuids[index],
                    name=self._names[index],
                    total_bytes=total,
                    used_bytes=used,
                    free_bytes=free,
                )
            )
        return result

    def _compute(self, handle: Any) -> list[Any]:
        nvml = self._nvml
        try:
            return nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except nvml.NVMLError_FunctionNotFound:
            # Drivers older than the _v3 symbol.
            return nvml.nvmlDeviceGetComputeRunningProcesses_v2(handle)

    def _graphics(self, handle: Any) -> list[Any]:
        nvml = self._nvml
        try:
            try:
                return nvml.nvmlDeviceGetGraphicsRunningProcesses(handle)
            except nvml.NVMLError_FunctionNotFound:
                return nvml.nvmlDeviceGetGraphicsRunningProcesses_v2(handle)
        except nvml.NVMLError_NotSupported:
            return []  # compute-only parts and some vGPU setups have no graphics engine

    def processes(self) -> list[GpuProcess]:
        nvml = self._nvml
        found: dict[tuple[int, int], GpuProcess] = {}
        for index, handle in enumerate(self._handles):
            try:
                listed = [*self._compute(handle), *self._graphics(handle)]
            except nvml.NVMLError as exc:
                raise GpuError(f"NVML process list of GPU {index} failed: {exc}") from exc
            for info in listed:
                pid, used = int(info.pid), info.usedGpuMemory
                key = (index, pid)
                # A process with compute and graphics contexts is listed twice with its total.
                previous = found.get(key)
                if previous is not None and (used is None or (previous.used_bytes or 0) >= used):
                    continue
                found[key] = GpuProcess(
                    gpu_index=index,
                    gpu_uuid=self._uuids[index],
                    pid=pid,
                    used_bytes=None if used is None else int(used),
                )
        return list(found.values())

    def telemetry(self) -> list[GpuTelemetry]:
        """Each GPU's figures of the moment (what `nvidia-smi --query-gpu` gives llama-swap's
        sampler): a figure the device does not report reads 0, and never fails the rest."""
        nvml = self._nvml
        driver = self._read(nvml.nvmlSystemGetDriverVersion, "")
        out = []
        for index, handle in enumerate(self._handles):
            mem = self._read(lambda h=handle: nvml.nvmlDeviceGetMemoryInfo(h), None)
            out.append(
                GpuTelemetry(
                    index=index,
                    uuid=self._uuids[index],
                    name=self._names[index],
                    temp_c=int(
                        self._read(
                            lambda h=handle: nvml.nvmlDeviceGetTemperature(
                                h, nvml.NVML_TEMPERATURE_GPU
                            ),
                            0,
                        )
                    ),
                    vram_temp_c=self._memory_temperature(handle),
                    gpu_util_pct=float(
                        self._read(lambda h=handle: nvml.nvmlDeviceGetUtilizationRates(h).gpu, 0)
                    ),
                    mem_used_bytes=int(mem.used) if mem is not None else 0,
                    mem_total_bytes=int(mem.total) if mem is not None else 0,
                    fan_speed_pct=float(
                        self._read(lambda h=handle: nvml.nvmlDeviceGetFanSpeed(h), 0)
                    ),
                    power_draw_w=self._read(lambda h=handle: nvml.nvmlDeviceGetPowerUsage(h), 0)
                    / 1000.0,
                    vendor="NVIDIA",
                    architecture=self._architecture(handle),
                    driver_version=_text(driver),
                    power_limit_w=self._read(
                        lambda h=handle: nvml.nvmlDeviceGetEnforcedPowerLimit(h), 0
                    )
                    / 1000.0,
                )
            )
        return out

    def _read(self, call: Any, default: Any) -> Any:
        try:
            return call()
        except self._nvml.NVMLError:
            return default  # not supported on this part, or not permitted: the figure is absent

    def _memory_temperature(self, handle: Any) -> int:
        nvml = self._nvml
        values = self._read(
            lambda: nvml.nvmlDeviceGetFieldValues(handle, [nvml.NVML_FI_DEV_MEMORY_TEMP]), None
        )
        if not values or values[0].nvmlReturn != nvml.NVML_SUCCESS:
            return 0
        value = values[0]
        if value.valueType == nvml.NVML_VALUE_TYPE_UNSIGNED_INT:
            return int(value.value.uiVal)
        if value.valueType == nvml.NVML_VALUE_TYPE_SIGNED_INT:
            return int(value.value.siVal)
        return 0

    def _architecture(self, handle: Any) -> str:
        nvml = self._nvml
        code = self._read(lambda: nvml.nvmlDeviceGetArchitecture(handle), None)
        for name in dir(nvml):
            if name.startswith("NVML_DEVICE_ARCH_") and getattr(nvml, name) == code:
                label = name.removeprefix("NVML_DEVICE_ARCH_")
                return "" if label == "UNKNOWN" else label.capitalize()
        return ""

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass  # shutting down a half-initialised NVML; nothing left to release
