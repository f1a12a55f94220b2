"""What a CUDA checkpoint backend is: the driver's five calls that suspend a CUDA process from
outside (NVIDIA driver 570 and later; CUDA driver API, "CUDA Checkpointing"), for `sleep: cuda`
(`cuda_sleep.py` uses them). The backends:

* `DriverCheckpointer` (`cuda_driver.py`): the real calls, through NVIDIA's Python bindings
  (`cuda-bindings`, the optional extra `swapd[cuda]`, imported only when asked for);
* `FakeCheckpointer` (`cuda_fake.py`): a stand-in for tests on machines without a GPU, which moves
  the fake GPU backend's accounting (`gpu_fake.py`);
* `Unavailable`: neither can be used here; `reason` says why (a swap stops the model instead).

Chosen (`cuda_choice.py`, apart from this interface so that no backend imports the module that
imports it) as the GPU backend is (`gpu.py`): `$SWAPD_CUDA_CHECKPOINT` (`auto`, `driver`, `fake`,
`none`); `auto` takes the fake where the GPU backend is the fake (`SWAPD_GPU_BACKEND=fake`), else
the driver. The calls are blocking C calls (a lock waits for the CUDA work in flight, a
checkpoint copies the whole GPU memory to host RAM): callers run them in a worker thread.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

CHECKPOINT_ENV = "SWAPD_CUDA_CHECKPOINT"
MODES = ("auto", "driver", "fake", "none")


class Step(StrEnum):
    """One of the driver's checkpoint calls."""

    LOCK = "lock"  # cuCheckpointProcessLock: further CUDA calls of the process block
    CHECKPOINT = "checkpoint"  # cuCheckpointProcessCheckpoint: GPU memory to host, released
    RESTORE = "restore"  # cuCheckpointProcessRestore: host copy back to the GPU
    UNLOCK = "unlock"  # cuCheckpointProcessUnlock: its CUDA calls run again
    STATE = "state"  # cuCheckpointProcessGetState


class ProcessState(StrEnum):
    """A CUDA process's checkpoint state (`CUprocessState`)."""

    RUNNING = "running"
    LOCKED = "locked"
    CHECKPOINTED = "checkpointed"
    FAILED = "failed"
    BUSY = "busy"  # checkpointing or restoring, in another caller


class CheckpointError(Exception):
    """A checkpoint call that failed: which, for which process, and the driver's words.
    `timed_out`: a lock that did not get hold of the process's CUDA work within its timeout (the
    process is left running)."""

    def __init__(self, step: Step, pid: int, message: str, *, timed_out: bool = False) -> None:
        super().__init__(f"cuda {step} of pid {pid} {message}")
        self.step = step
        self.pid = pid
        self.timed_out = timed_out


class CheckpointBackend(Protocol):
    name: str

    def lock(self, pid: int, timeout: float) -> None: ...

    def checkpoint(self, pid: int) -> None: ...

    def restore(self, pid: int) -> None: ...

    def unlock(self, pid: int) -> None: ...

    def state(self, pid: int) -> ProcessState: ...


class Unavailable:
    """No checkpoint API here: `reason` says why (no GPU driver, one older than 570, the bindings
    not installed)."""

    name = "none"

    def __init__(self, reason: str) -> None:
        self.reason = reason
