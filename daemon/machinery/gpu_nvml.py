"""The NVML GPU backend (nvidia-ml-py's `pynvml`): inventory and per-process GPU memory."""

from __future__ import annotations

import threading
from typing import Any

from ...ipc.model_status import GpuInfo
from ..errors import GpuError
from .gpu_backend import GpuProcess


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

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass  # shutting down a half-initialised NVML; nothing left to release
