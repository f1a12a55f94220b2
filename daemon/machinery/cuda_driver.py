"""The real CUDA checkpoint backend: the driver's `cuCheckpointProcess*` calls through NVIDIA's
Python bindings (PyPI `cuda-bindings`, `cuda.bindings.driver`; `pip install 'swapd[cuda]'`).

The bindings are imported here only, when a `sleep: cuda` model first sleeps (or check-config
asks): swapd runs without them. A restore needs `cuInit` in the calling process (or persistence
mode), so `open` calls it; `cuInit` loads the driver but creates no context, so the daemon holds
no GPU memory for it.
"""

from __future__ import annotations

from typing import Any

from .cuda_backend import CheckpointError, ProcessState, Step, Unavailable

# The checkpoint calls came with CUDA 12.8's driver API (driver 570); `cuDriverGetVersion` says
# 1000 * major + 10 * minor.
LEAST_DRIVER = 12080


class DriverCheckpointer:
    name = "driver"

    def __init__(self, driver: Any) -> None:
        self._driver = driver
        self._states = {
            driver.CUprocessState.CU_PROCESS_STATE_RUNNING: ProcessState.RUNNING,
            driver.CUprocessState.CU_PROCESS_STATE_LOCKED: ProcessState.LOCKED,
            driver.CUprocessState.CU_PROCESS_STATE_CHECKPOINTED: ProcessState.CHECKPOINTED,
            driver.CUprocessState.CU_PROCESS_STATE_FAILED: ProcessState.FAILED,
        }

    @classmethod
    def open(cls) -> DriverCheckpointer | Unavailable:
        """The backend, or why it cannot be used here."""
        try:
            from cuda.bindings import driver
        except ImportError as exc:
            return Unavailable(
                f"NVIDIA's CUDA bindings are not installed (pip install 'swapd[cuda]'): {exc}"
            )
        try:
            (err,) = driver.cuInit(0)
        except Exception as exc:  # the bindings raise when libcuda itself is missing
            return Unavailable(f"no NVIDIA driver (libcuda): {type(exc).__name__}: {exc}")
        if err != driver.CUresult.CUDA_SUCCESS:
            return Unavailable(f"cuInit failed: {_name(err)}")
        err, version = driver.cuDriverGetVersion()
        if err != driver.CUresult.CUDA_SUCCESS or version < LEAST_DRIVER:
            return Unavailable(
                f"the NVIDIA driver's CUDA {version // 1000}.{version % 1000 // 10} has no "
                "checkpoint API (CUDA 12.8, driver 570, or later)"
            )
        if not hasattr(driver, "cuCheckpointProcessLock"):
            return Unavailable(
                "these CUDA bindings have no cuCheckpointProcessLock (12.8 or later)"
            )
        return cls(driver)

    def _check(self, step: Step, pid: int, result: Any) -> Any:
        err = result[0]
        if err == self._driver.CUresult.CUDA_SUCCESS:
            return result[1] if len(result) > 1 else None
        timed_out = step is Step.LOCK and err in (
            self._driver.CUresult.CUDA_ERROR_TIMEOUT,
            self._driver.CUresult.CUDA_ERROR_NOT_READY,
        )
        raise CheckpointError(step, pid, f"failed: {_name(err)}", timed_out=timed_out)

    def lock(self, pid: int, timeout: float) -> None:
        args = self._driver.CUcheckpointLockArgs()
        args.timeoutMs = max(1, int(timeout * 1000))
        self._check(Step.LOCK, pid, self._driver.cuCheckpointProcessLock(pid, args))

    def checkpoint(self, pid: int) -> None:
        self._check(Step.CHECKPOINT, pid, self._driver.cuCheckpointProcessCheckpoint(pid, None))

    def restore(self, pid: int) -> None:
        self._check(Step.RESTORE, pid, self._driver.cuCheckpointProcessRestore(pid, None))

    def unlock(self, pid: int) -> None:
        self._check(Step.UNLOCK, pid, self._driver.cuCheckpointProcessUnlock(pid, None))

    def state(self, pid: int) -> ProcessState:
        found = self._check(Step.STATE, pid, self._driver.cuCheckpointProcessGetState(pid))
        return self._states.get(found, ProcessState.BUSY)


def _name(err: Any) -> str:
    return str(getattr(err, "name", err))
