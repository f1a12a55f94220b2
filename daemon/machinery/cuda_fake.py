"""A stand-in for the CUDA driver's checkpoint calls (`cuCheckpointProcessLock`, `...Checkpoint`,
`...Restore`, `...Unlock`, `...GetState`) on machines without a GPU: tests and demos, with the
fake GPU backend (`gpu_fake.py`).

What it stands for, and how: the driver keeps each CUDA process's checkpoint state (running,
locked, checkpointed); this keeps it in a file, `$SWAPD_FAKE_CUDA_DIR/<pid>.state` (no file:
running). While the state is `checkpointed` the fake GPU backend lists the process on no GPU, as
NVML lists a checkpointed process nowhere: its memory is back. While it is `locked` or
`checkpointed` the process's CUDA work blocks, as the driver's lock blocks it: a fake model
process honours the file (tests/support/upstreams/fake_model.py waits before it answers, and the
GPU check's holder waits too). The calls follow the driver's state rules (a lock needs a running
process, a checkpoint a locked one, a restore a checkpointed one, an unlock a locked one) and fail
as the driver does otherwise, or for a process that does not exist.

The copies take time when `$SWAPD_FAKE_CUDA_GBPS` is set: a checkpoint (device to host) and a
restore (host to device) each last the process's fake GPU memory (what `gpu_fake.py` lists for it)
over that many GB/s, as the driver's copies are bound by the bus. Unset: at once (tests).

For tests, each call is appended to `$SWAPD_FAKE_CUDA_DIR/calls.log` ("lock 1234"), and a file
`fail-<step>` there makes that step fail (`fail-lock`: the lock waits its timeout, then times out,
the process left running, as the driver's does).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from .cuda_backend import CheckpointError, ProcessState, Step, Unavailable
from .fake_footprint import declared_memory

DIR_ENV = "SWAPD_FAKE_CUDA_DIR"
RATE_ENV = "SWAPD_FAKE_CUDA_GBPS"
CALLS = "calls.log"


def state_file(folder: str | Path, pid: int | str) -> Path:
    return Path(folder, f"{pid}.state")


def read_state(folder: str | Path, pid: int | str) -> ProcessState:
    """The process's state as the stand-in keeps it (no file: running)."""
    try:
        return ProcessState(state_file(folder, pid).read_text().strip())
    except (OSError, ValueError):
        return ProcessState.RUNNING


class FakeCheckpointer:
    name = "fake"

    def __init__(
        self, folder: Path, proc: Path = Path("/proc"), environ: Mapping[str, str] | None = None
    ) -> None:
        self.folder = folder
        self._proc = proc
        self._env = dict(os.environ if environ is None else environ)
        try:
            self._rate = float(self._env.get(RATE_ENV, "0")) * 1e9
        except ValueError:
            self._rate = 0.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> FakeCheckpointer | Unavailable:
        folder = environ.get(DIR_ENV)
        if not folder:
            return Unavailable(f"the fake checkpoint backend needs {DIR_ENV} (a folder)")
        Path(folder).mkdir(parents=True, exist_ok=True)
        return cls(Path(folder), environ=environ)

    def _called(self, step: Step, pid: int) -> None:
        with (self.folder / CALLS).open("a", encoding="utf-8") as log:
            log.write(f"{step} {pid}\n")

    def _step(self, step: Step, pid: int, need: ProcessState, then: ProcessState) -> None:
        self._called(step, pid)
        if not (self._proc / str(pid)).is_dir():
            raise CheckpointError(step, pid, "failed: CUDA_ERROR_INVALID_VALUE (no such process)")
        if (self.folder / f"fail-{step}").exists():
            raise CheckpointError(step, pid, "failed: CUDA_ERROR_UNKNOWN (a fault set by a test)")
        now = read_state(self.folder, pid)
        if now is not need:
            raise CheckpointError(step, pid, f"failed: CUDA_ERROR_ILLEGAL_STATE (it is {now})")
        path = state_file(self.folder, pid)
        if then is ProcessState.RUNNING:
            path.unlink(missing_ok=True)
            return
        path.with_suffix(".tmp").write_text(str(then))
        os.replace(path.with_suffix(".tmp"), path)

    def lock(self, pid: int, timeout: float) -> None:
        if (self.folder / f"fail-{Step.LOCK}").exists():
            self._called(Step.LOCK, pid)
            time.sleep(timeout)  # what the driver does when the CUDA work in flight never ends
            raise CheckpointError(
                Step.LOCK, pid, f"timed out after {timeout:g}s: CUDA_ERROR_TIMEOUT", timed_out=True
            )
        self._step(Step.LOCK, pid, ProcessState.RUNNING, ProcessState.LOCKED)

    def checkpoint(self, pid: int) -> None:
        self._copy(pid)
        self._step(Step.CHECKPOINT, pid, ProcessState.LOCKED, ProcessState.CHECKPOINTED)

    def restore(self, pid: int) -> None:
        self._copy(pid)
        self._step(Step.RESTORE, pid, ProcessState.CHECKPOINTED, ProcessState.LOCKED)

    def copy_seconds(self, pid: int) -> float:
        """How long the driver's copy of the process's GPU memory takes (at the env's rate)."""
        return declared_memory(self._env, str(pid)) / self._rate if self._rate > 0 else 0.0

    def _copy(self, pid: int) -> None:
        if seconds := self.copy_seconds(pid):
            time.sleep(seconds)

    def unlock(self, pid: int) -> None:
        self._step(Step.UNLOCK, pid, ProcessState.LOCKED, ProcessState.RUNNING)

    def state(self, pid: int) -> ProcessState:
        if not (self._proc / str(pid)).is_dir():
            raise CheckpointError(Step.STATE, pid, "failed: CUDA_ERROR_INVALID_VALUE")
        return read_state(self.folder, pid)

    def calls(self) -> list[str]:
        """The calls made so far, in order ("lock 1234")."""
        try:
            return (self.folder / CALLS).read_text().splitlines()
        except OSError:
            return []
