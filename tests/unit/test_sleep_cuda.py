"""`sleep: cuda` below the stack: the preset as the config reads it (and the docs list it), the
checkpoint stand-in's state rules and its effect on the fake GPU, the host-memory reading,
check-config's warning where the driver's API is missing, and the backend choice."""

from __future__ import annotations

import enum
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from swapd.daemon.config.loader import ConfigError, Loaded, load_text
from swapd.daemon.config.render import render
from swapd.daemon.config.sections.sleep_fields import PRESETS
from swapd.daemon.machinery.cuda_backend import (
    CheckpointError,
    ProcessState,
    Step,
    Unavailable,
)
from swapd.daemon.machinery.cuda_choice import make_checkpointer
from swapd.daemon.machinery.cuda_fake import FakeCheckpointer
from swapd.daemon.machinery.cuda_sleep import mem_available
from swapd.daemon.machinery.gpu_fake import FakeBackend, fake_uuid
from swapd.ipc.routing_table import SleepMethod
from tests.support.cli import swapd
from tests.support.stack import wait_for

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3


def _load(text: str) -> Loaded:
    return load_text(textwrap.dedent(text).lstrip("\n"), "sleep.yaml", environ={})


def _errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _load(text)
    return [str(issue) for issue in caught.value.issues]


def test_the_cuda_preset_sends_no_call_and_takes_a_lock_timeout() -> None:
    loaded = _load(
        """
        models:
          a:
            cmd: llama-server --port ${PORT}
            sleep: cuda
          b:
            cmd: llama-server --port ${PORT}
            sleep: {preset: cuda, lockTimeout: 2.5, stopAfter: 600}
        """
    )
    assert loaded.warnings == ()
    a, b = loaded.config.models["a"].sleep, loaded.config.models["b"].sleep
    assert a is not None and a.method is SleepMethod.CUDA and a.preset == "cuda"
    assert a.sleep == () and a.wake == () and a.lock_timeout == 10.0
    assert b is not None and (b.lock_timeout, b.stop_after) == (2.5, 600.0)
    # check-config --print shows what it stands for, and reads back the same.
    shown = render(loaded.config)
    assert "preset: cuda" in shown and "lockTimeout: 2.5" in shown


@pytest.mark.parametrize(
    ("written", "words"),
    [
        ("{preset: cuda, sleepEndpoints: [POST /x]}", "preset cuda sends no HTTP call"),
        ("{preset: cuda, servesAsleep: true}", "a checkpointed server serves nothing"),
        ("{preset: cuda, lockTimeout: 0}", "lockTimeout: must be more than 0 seconds"),
        ("{preset: vllm, lockTimeout: 3}", "only preset cuda takes a lockTimeout"),
    ],
)
def test_what_the_cuda_preset_cannot_take_is_an_error(written: str, words: str) -> None:
    errors = _errors(f"models:\n  a:\n    cmd: srv --port ${{PORT}}\n    sleep: {written}\n")
    assert len(errors) == 1 and words in errors[0], errors


def test_the_docs_list_every_preset_in_the_sleep_table() -> None:
    """docs/configuration.md's preset table (under `sleep`) and its `preset` row name exactly the
    declared presets."""
    text = (REPO / "docs" / "configuration.md").read_text()
    section = text[text.index("### `sleep`") :]
    section = section[: section.index("\n### ", 5)]
    table = re.findall(r"^\| `([a-z0-9-]+)` \|", section, re.MULTILINE)
    presets = [name for name in table if name in PRESETS or name not in _KEYS]
    assert presets == list(PRESETS)
    row = next(line for line in section.splitlines() if line.startswith("| `preset` |"))
    assert re.findall(r"`([a-z0-9-]+)`", row.split("|")[2]) == list(PRESETS)


# The sleep mapping's keys, the other table of the section.
_KEYS = {
    "preset",
    "sleepEndpoints",
    "wakeEndpoints",
    "sleepRequestTimeout",
    "wakeRequestTimeout",
    "stopAfter",
    "servesAsleep",
    "lockTimeout",
}


def _sleeper(tmp_path: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "0",
        "SWAPD_FAKE_GPU_MEM": str(3 * GIB),
        "SWAPD_FAKE_CUDA_DIR": str(tmp_path),
        "SWAPD_FAKE_GPU_SCOPE": str(tmp_path),
    }
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)


def test_the_stand_in_follows_the_drivers_states_and_moves_the_fake_gpus_memory(
    tmp_path: Path,
) -> None:
    proc = _sleeper(tmp_path)
    try:
        fake = FakeCheckpointer(tmp_path)
        gpu = FakeBackend([("Fake 0", fake_uuid(0), 80 * GIB)], scope=str(tmp_path))

        def held() -> int:
            return sum(p.used_bytes or 0 for p in gpu.processes() if p.pid == proc.pid)

        # The child's environment is readable once it exec'd.
        assert wait_for(held, what="the child on the fake GPU") == 3 * GIB
        with pytest.raises(CheckpointError, match="ILLEGAL_STATE"):
            fake.checkpoint(proc.pid)  # not locked
        fake.lock(proc.pid, 1.0)
        assert fake.state(proc.pid) is ProcessState.LOCKED and held() == 3 * GIB
        fake.checkpoint(proc.pid)
        assert fake.state(proc.pid) is ProcessState.CHECKPOINTED and held() == 0
        fake.restore(proc.pid)
        assert fake.state(proc.pid) is ProcessState.LOCKED and held() == 3 * GIB
        fake.unlock(proc.pid)
        assert fake.state(proc.pid) is ProcessState.RUNNING
        (tmp_path / "fail-lock").touch()
        with pytest.raises(CheckpointError) as caught:
            fake.lock(proc.pid, 0.01)
        assert caught.value.timed_out and caught.value.step is Step.LOCK
        assert fake.state(proc.pid) is ProcessState.RUNNING  # the driver leaves it running
        assert fake.calls() == [f"{step} {proc.pid}" for step in _ORDER]
    finally:
        proc.kill()
        proc.wait()
    (tmp_path / "fail-lock").unlink()
    with pytest.raises(CheckpointError, match="no such process"):
        FakeCheckpointer(tmp_path).lock(proc.pid, 1.0)


def test_the_stand_ins_copies_take_the_processs_memory_over_the_rate_when_one_is_set(
    tmp_path: Path,
) -> None:
    (tmp_path / "4242").write_text(str(3 * 10**9))
    env = {"SWAPD_FAKE_CUDA_DIR": str(tmp_path), "SWAPD_FAKE_GPU_MEM_DIR": str(tmp_path)}
    quick = FakeCheckpointer.from_env(env)
    timed = FakeCheckpointer.from_env(env | {"SWAPD_FAKE_CUDA_GBPS": "20"})
    assert isinstance(quick, FakeCheckpointer) and isinstance(timed, FakeCheckpointer)
    assert quick.copy_seconds(4242) == 0.0
    assert timed.copy_seconds(4242) == pytest.approx(0.15)
    assert timed.copy_seconds(4343) == pytest.approx(GIB / 20e9)  # undeclared: the default


_ORDER = ["checkpoint", "lock", "checkpoint", "restore", "unlock", "lock"]


def test_mem_available_reads_meminfo_and_says_none_where_it_cannot(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  8000 kB\nMemFree:  100 kB\nMemAvailable:  2048 kB\n")
    assert mem_available(meminfo) == 2048 * 1024
    assert mem_available(tmp_path / "missing") is None
    meminfo.write_text("MemTotal: 8000 kB\n")
    assert mem_available(meminfo) is None


def test_the_backend_is_chosen_as_the_gpu_backend_is(tmp_path: Path) -> None:
    fake = make_checkpointer({"SWAPD_GPU_BACKEND": "fake", "SWAPD_FAKE_CUDA_DIR": str(tmp_path)})
    assert isinstance(fake, FakeCheckpointer)
    missing = make_checkpointer({"SWAPD_CUDA_CHECKPOINT": "fake"})
    assert isinstance(missing, Unavailable) and "SWAPD_FAKE_CUDA_DIR" in missing.reason
    assert isinstance(make_checkpointer({"SWAPD_CUDA_CHECKPOINT": "none"}), Unavailable)
    wrong = make_checkpointer({"SWAPD_CUDA_CHECKPOINT": "cuda"})
    assert isinstance(wrong, Unavailable) and "none of auto, driver, fake, none" in wrong.reason


def test_check_config_warns_where_the_drivers_checkpoint_api_is_missing(tmp_path: Path) -> None:
    """This machine has no NVIDIA driver (and the `cuda` extra is not installed): the model is
    usable, with a warning that a swap stops it."""
    config = tmp_path / "config.yaml"
    config.write_text("models:\n  a:\n    cmd: llama-server --port ${PORT}\n    sleep: cuda\n")
    result = swapd(
        "check-config",
        "-c",
        str(config),
        env={"SWAPD_GPU_BACKEND": "", "SWAPD_CUDA_CHECKPOINT": ""},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK: 1 model, 1 warning"
    assert result.stderr.startswith("warning: models.a.sleep: cuda cannot be used on this host (")
    assert result.stderr.rstrip().endswith("): a swap stops it instead")
    # With the checkpoint API there (the stand-in), no warning.
    result = swapd(
        "check-config",
        "-c",
        str(config),
        env={"SWAPD_CUDA_CHECKPOINT": "fake", "SWAPD_FAKE_CUDA_DIR": str(tmp_path / "cuda")},
    )
    assert (result.returncode, result.stderr) == (0, "")


class _Driver:
    """The shapes of `cuda.bindings.driver` the real backend uses (no GPU here): each call
    answers a tuple whose first item is its `CUresult`; `answers` sets a call's."""

    class CUresult(enum.IntEnum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_NOT_READY = 600
        CUDA_ERROR_ILLEGAL_STATE = 401
        CUDA_ERROR_TIMEOUT = 909

    class CUprocessState(enum.IntEnum):
        CU_PROCESS_STATE_RUNNING = 0
        CU_PROCESS_STATE_LOCKED = 1
        CU_PROCESS_STATE_CHECKPOINTED = 2
        CU_PROCESS_STATE_FAILED = 3

    class CUcheckpointLockArgs:
        timeoutMs = 0

    def __init__(self) -> None:
        self.answers: dict[str, tuple[object, ...]] = {}
        self.seen: list[tuple[str, int, object]] = []

    def _call(self, name: str, pid: int, args: object = None) -> tuple[object, ...]:
        self.seen.append((name, pid, getattr(args, "timeoutMs", args)))
        return self.answers.get(name, (self.CUresult.CUDA_SUCCESS,))

    def cuCheckpointProcessLock(self, pid: int, args: object) -> tuple[object, ...]:
        return self._call("lock", pid, args)

    def cuCheckpointProcessCheckpoint(self, pid: int, args: object) -> tuple[object, ...]:
        return self._call("checkpoint", pid, args)

    def cuCheckpointProcessRestore(self, pid: int, args: object) -> tuple[object, ...]:
        return self._call("restore", pid, args)

    def cuCheckpointProcessUnlock(self, pid: int, args: object) -> tuple[object, ...]:
        return self._call("unlock", pid, args)

    def cuCheckpointProcessGetState(self, pid: int) -> tuple[object, ...]:
        return self._call("state", pid)


def test_the_driver_backend_reads_the_bindings_answers() -> None:
    from swapd.daemon.machinery.cuda_driver import DriverCheckpointer

    driver = _Driver()
    real = DriverCheckpointer(driver)
    real.lock(7, 2.5)
    real.checkpoint(7)
    real.restore(7)
    real.unlock(7)
    assert driver.seen == [("lock", 7, 2500), ("checkpoint", 7, None), ("restore", 7, None),
                           ("unlock", 7, None)]  # fmt: skip
    driver.answers["state"] = (
        driver.CUresult.CUDA_SUCCESS,
        driver.CUprocessState.CU_PROCESS_STATE_CHECKPOINTED,
    )
    assert real.state(7) is ProcessState.CHECKPOINTED
    driver.answers["lock"] = (driver.CUresult.CUDA_ERROR_TIMEOUT,)
    with pytest.raises(CheckpointError) as caught:
        real.lock(7, 1.0)
    assert caught.value.timed_out and "CUDA_ERROR_TIMEOUT" in str(caught.value)
    driver.answers["checkpoint"] = (driver.CUresult.CUDA_ERROR_ILLEGAL_STATE,)
    with pytest.raises(CheckpointError) as caught:
        real.checkpoint(7)
    assert not caught.value.timed_out and caught.value.step is Step.CHECKPOINT


def test_without_the_bindings_the_driver_backend_says_why() -> None:
    """This machine has no `cuda-bindings` (the `cuda` extra): unavailable, with the extra's
    name, never an import error."""
    from swapd.daemon.machinery.cuda_driver import DriverCheckpointer

    found = DriverCheckpointer.open()
    assert isinstance(found, Unavailable)
    assert "swapd[cuda]" in found.reason or "no NVIDIA driver" in found.reason
