"""GPU backends (daemon/gpu.py, gpu_nvml.py, gpu_fake.py).

This machine has no GPU and no NVML library. NvmlBackend is tested against a stub `pynvml`
module that keeps the real module's error classes and fakes only the driver calls; the fake
backend, which stands for NVML in process tests, is tested with real child processes.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pynvml
import pytest

from swapd.daemon.config import Config
from swapd.daemon.machinery.gpu import (
    GpuError,
    NullBackend,
    canonical_gpu_ids,
    make_backend,
    resolve_gpus,
    verify_gpus,
    wait_released,
)
from swapd.daemon.machinery.gpu_fake import FakeBackend, fake_uuid
from swapd.daemon.machinery.gpu_nvml import NvmlBackend
from swapd.ipc.model_status import GpuInfo
from tests.support.models import model
from tests.support.nvml import StubNvml
from tests.support.paths import REPO

FAKE = {"SWAPD_GPU_BACKEND": "fake", "SWAPD_FAKE_GPUS": "2"}


def _nvml_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


NO_NVML = pytest.mark.skipif(_nvml_present(), reason="this host has a working NVML")


# ------------------------------------------------------------------------------------------------
# The fake backend with real processes.

SLEEPER = "import time\nprint('ready', flush=True)\nwhile True: time.sleep(1)\n"
IGNORES_TERM = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + SLEEPER


@pytest.fixture
def spawn() -> Iterator[Any]:
    children: list[subprocess.Popen[bytes]] = []

    def start(env: dict[str, str], code: str = SLEEPER) -> subprocess.Popen[bytes]:
        # Popen returns once exec succeeded, so /proc/<pid>/environ already holds `env`; the
        # "ready" line says the child's signal handlers are in place.
        child = subprocess.Popen(
            [sys.executable, "-c", code], env={"PATH": "/usr/bin", **env}, stdout=subprocess.PIPE
        )
        children.append(child)
        if code != "pass":
            assert child.stdout is not None
            assert child.stdout.readline() == b"ready\n"
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def mine(backend: Any, *children: subprocess.Popen[bytes]) -> list[tuple[int, int, int | None]]:
    pids = {c.pid for c in children}
    return sorted((p.gpu_index, p.pid, p.used_bytes) for p in backend.processes() if p.pid in pids)


def test_fake_lists_processes_on_the_gpus_their_environment_names(spawn: Any) -> None:
    backend = make_backend(environ=FAKE)
    assert isinstance(backend, FakeBackend)
    one = spawn({"CUDA_VISIBLE_DEVICES": "1", "SWAPD_FAKE_GPU_MEM": "12345"})
    both = spawn({"CUDA_VISIBLE_DEVICES": f"0,{fake_uuid(1)}", "SWAPD_FAKE_GPU_MEM": "7"})
    hidden = spawn({"CUDA_VISIBLE_DEVICES": ""})
    every = spawn({"SWAPD_FAKE_GPU_MEM": "3"})
    plain = spawn({})
    assert mine(backend, one) == [(1, one.pid, 12345)]
    assert mine(backend, both) == [(0, both.pid, 7), (1, both.pid, 7)]
    assert mine(backend, hidden, plain) == []
    assert mine(backend, every) == [(0, every.pid, 3), (1, every.pid, 3)]
    devices = backend.devices()
    assert [d.index for d in devices] == [0, 1]
    assert devices[1].uuid == fake_uuid(1)
    assert devices[1].used_bytes >= 12345 + 7 + 3
    assert devices[1].free_bytes == devices[1].total_bytes - devices[1].used_bytes


def test_fake_scope_keeps_other_instances_processes_out(spawn: Any) -> None:
    backend = make_backend(environ={**FAKE, "SWAPD_FAKE_GPU_SCOPE": "run-1"})
    ours = spawn({"CUDA_VISIBLE_DEVICES": "0", "SWAPD_FAKE_GPU_SCOPE": "run-1"})
    theirs = spawn({"CUDA_VISIBLE_DEVICES": "0", "SWAPD_FAKE_GPU_SCOPE": "run-2"})
    unscoped = spawn({"CUDA_VISIBLE_DEVICES": "0"})
    assert mine(backend, ours, theirs, unscoped) == [(0, ours.pid, 1024**3)]
    # Without a scope the fake sees every process, as NVML would.
    assert len(mine(make_backend(environ=FAKE), ours, theirs, unscoped)) == 3


def test_fake_process_disappears_when_it_exits(spawn: Any) -> None:
    backend = make_backend(environ=FAKE)
    child = spawn({"CUDA_VISIBLE_DEVICES": "0"})
    assert mine(backend, child) == [(0, child.pid, 1024**3)]
    child.terminate()
    child.wait()
    assert mine(backend, child) == []


def test_fake_ignores_a_zombie(spawn: Any) -> None:
    # An exited child that nobody reaped yet has freed its GPU memory; NVML no longer lists it.
    backend = make_backend(environ=FAKE)
    child = spawn({"CUDA_VISIBLE_DEVICES": "0"}, code="pass")
    # Wait for the exit without reaping it (WNOWAIT keeps the zombie).
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert mine(backend, child) == []


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("3", ["Fake GPU 0", "Fake GPU 1", "Fake GPU 2"]),
        ('["A100", {"name": "H100", "uuid": "GPU-x", "total_bytes": 5}]', ["A100", "H100"]),
        ("0", []),
    ],
)
def test_fake_inventory_from_env(value: str, names: list[str]) -> None:
    devices = make_backend(environ={**FAKE, "SWAPD_FAKE_GPUS": value}).devices()
    assert [d.name for d in devices] == names


def test_fake_inventory_object_fields() -> None:
    env = {**FAKE, "SWAPD_FAKE_GPUS": '[{"name": "H100", "uuid": "GPU-x", "total_bytes": 5}]'}
    (device,) = make_backend(environ=env).devices()
    assert (device.uuid, device.total_bytes) == ("GPU-x", 5)


@pytest.mark.parametrize("value", ["two", "-1", '{"a": 1}', "[3]"])
def test_fake_inventory_rejects_garbage(value: str) -> None:
    with pytest.raises(GpuError, match="SWAPD_FAKE_GPUS"):
        make_backend(environ={**FAKE, "SWAPD_FAKE_GPUS": value})


def test_unknown_backend_mode() -> None:
    with pytest.raises(GpuError, match="unknown GPU backend 'cuda'"):
        make_backend("cuda", environ={})


# ------------------------------------------------------------------------------------------------
# wait_released, with real processes on fake GPUs.


async def test_wait_released_returns_nothing_once_the_process_exits(spawn: Any) -> None:
    backend = make_backend(environ=FAKE)
    child = spawn({"CUDA_VISIBLE_DEVICES": "1"})
    child.send_signal(signal.SIGTERM)
    assert await wait_released(backend, {child.pid}, ("1",), timeout=10) == []
    # It really returned because the process went away, not because it looked elsewhere.
    assert child.poll() is not None or mine(backend, child) == []


async def test_wait_released_reports_a_process_that_does_not_exit(spawn: Any) -> None:
    backend = make_backend(environ=FAKE)
    child = spawn({"CUDA_VISIBLE_DEVICES": "1", "SWAPD_FAKE_GPU_MEM": "4096"}, code=IGNORES_TERM)
    other = spawn({"CUDA_VISIBLE_DEVICES": "0"})
    child.send_signal(signal.SIGTERM)
    lingering = await wait_released(backend, {child.pid, other.pid}, ("1",), timeout=0.3)
    assert [(p.gpu, p.pid, p.used_bytes) for p in lingering] == [(fake_uuid(1), child.pid, 4096)]
    # By UUID and for every GPU as well.
    assert len(await wait_released(backend, {child.pid}, (fake_uuid(1).lower(),), 0.1)) == 1
    assert len(await wait_released(backend, {child.pid}, None, 0.1)) == 1
    # Not on GPU 0, so nothing lingers there.
    assert await wait_released(backend, {child.pid}, ("0",), timeout=0.1) == []


async def test_wait_released_for_any_pid_on_the_gpus(spawn: Any) -> None:
    # A scope of its own, so that GPU users of tests running in parallel are not counted.
    scope = {"SWAPD_FAKE_GPU_SCOPE": f"test-{os.getpid()}"}
    backend = make_backend(environ={**FAKE, **scope})
    child = spawn({"CUDA_VISIBLE_DEVICES": "1", **scope})
    neighbour = spawn({"CUDA_VISIBLE_DEVICES": "1", **scope})  # another model sharing the GPU
    spawn({"CUDA_VISIBLE_DEVICES": "0", **scope})  # a model on the other GPU
    lingering = await wait_released(backend, None, ("1",), 0.1, ignore_pids={neighbour.pid})
    assert [p.pid for p in lingering] == [child.pid]


async def test_wait_released_without_nvml_waits_for_nothing() -> None:
    assert await wait_released(NullBackend("no NVML"), {1}, None, timeout=5) == []


# ------------------------------------------------------------------------------------------------
# NvmlBackend against a stub pynvml (the real module's errors, fake driver calls).


def test_nvml_inventory_and_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    stub = StubNvml()
    monkeypatch.setitem(sys.modules, "pynvml", stub)
    backend = make_backend("nvml", environ={})
    assert isinstance(backend, NvmlBackend)
    assert backend.devices() == [
        GpuInfo(0, "GPU-stub-0", "NVIDIA H100", 80 * 2**30, 2**30, 0),
        GpuInfo(1, "GPU-stub-1", "NVIDIA L4", 80 * 2**30, 2 * 2**30, 0),
    ]
    procs = sorted((p.gpu_index, p.gpu_uuid, p.pid, p.used_bytes) for p in backend.processes())
    assert procs == [
        (0, "GPU-stub-0", 100, 5 * 2**30),  # compute + graphics context: listed once
        (1, "GPU-stub-1", 200, None),  # NVML could not tell its memory
        (1, "GPU-stub-1", 300, 2**30),
        (1, "GPU-stub-1", 400, 2**20),  # graphics only
    ]
    assert "compute_v2" in stub.calls  # fell back on the old driver
    backend.close()
    backend.close()
    assert stub.calls.count("shutdown") == 1


def test_nvml_without_graphics_support_lists_compute_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stub = StubNvml(old_driver=False)

    def unsupported(handle: int) -> list[Any]:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(stub, "nvmlDeviceGetGraphicsRunningProcesses", unsupported)
    monkeypatch.setitem(sys.modules, "pynvml", stub)
    assert sorted(p.pid for p in make_backend("nvml", environ={}).processes()) == [100, 200, 300]


def test_nvml_uses_v3_when_the_driver_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    stub = StubNvml(old_driver=False)
    monkeypatch.setitem(sys.modules, "pynvml", stub)
    backend = make_backend("nvml", environ={})
    assert len(backend.processes()) == 4
    assert "compute_v2" not in stub.calls


async def test_wait_released_polls_nvml_until_the_process_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stub = StubNvml()
    monkeypatch.setitem(sys.modules, "pynvml", stub)
    backend = make_backend("nvml", environ={})
    polls = 0

    def compute_v2(handle: int) -> list[Any]:
        nonlocal polls
        if handle == 1:
            polls += 1
            if polls >= 3:  # the driver frees pid 300's context on the third look
                stub.compute[1] = [(200, None)]
        return stub._procs(stub.compute[handle])

    monkeypatch.setattr(stub, "nvmlDeviceGetComputeRunningProcesses_v2", compute_v2)
    assert await wait_released(backend, {300}, ("1",), timeout=10, poll=0.01) == []
    assert polls == 3


async def test_wait_released_turns_an_nvml_failure_into_a_gpu_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stub = StubNvml()
    monkeypatch.setitem(sys.modules, "pynvml", stub)
    backend = make_backend("nvml", environ={})

    def lost(handle: int) -> list[Any]:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    monkeypatch.setattr(stub, "nvmlDeviceGetComputeRunningProcesses_v2", lost)
    with pytest.raises(GpuError, match="NVML process list of GPU 0 failed: GPU is lost"):
        await wait_released(backend, {300}, None, timeout=1)


def test_auto_falls_back_with_one_line_when_the_library_is_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", StubNvml(pynvml.NVMLError_LibraryNotFound()))
    caplog.set_level(logging.INFO, logger="swapd.gpu")
    backend = make_backend(environ={})
    assert isinstance(backend, NullBackend) and not backend.broken
    assert len(caplog.records) == 1
    assert "NVMLError_LibraryNotFound" in caplog.records[0].getMessage()


@NO_NVML
def test_auto_falls_back_on_this_machine(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="swapd.gpu")
    backend = make_backend("auto", environ={})
    assert isinstance(backend, NullBackend)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "NVML unavailable (NVMLError_LibraryNotFound" in caplog.text
    assert backend.devices() == [] and backend.processes() == []
    # Models with gpus still start (CUDA_VISIBLE_DEVICES is set, nothing is checked).
    verify_gpus(backend, config({"a": ("0",)}))


@NO_NVML
def test_nvml_mode_fails_hard_on_this_machine() -> None:
    with pytest.raises(GpuError, match="NVML unavailable") as info:
        make_backend("nvml", environ={})
    assert info.value.library_missing


def test_env_picks_the_backend_when_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(make_backend("auto", environ=FAKE), FakeBackend)
    assert isinstance(make_backend(environ={"SWAPD_GPU_BACKEND": "none"}), NullBackend)
    monkeypatch.setenv("SWAPD_GPU_BACKEND", "fake")
    assert isinstance(make_backend(), FakeBackend)


# ------------------------------------------------------------------------------------------------
# Broken NVML, and gpus that name no GPU.


def config(models: dict[str, tuple[str, ...] | None]) -> Config:
    return Config(models={mid: model(mid, gpus) for mid, gpus in models.items()})


@pytest.mark.parametrize(
    "error",
    [pynvml.NVMLError_DriverNotLoaded(), pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)],
    ids=["driver-not-loaded", "no-permission"],
)
def test_broken_nvml_with_gpus_configured_is_an_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", StubNvml(error))
    backend = make_backend(environ={})
    assert isinstance(backend, NullBackend) and backend.broken
    assert len(caplog.records) == 1
    with pytest.raises(GpuError, match=r"models a, c set `gpus`, which needs a working NVML"):
        verify_gpus(backend, config({"a": ("0",), "b": None, "c": ("1",)}))
    # Without gpus in the config, a broken NVML is the logged line only.
    verify_gpus(backend, config({"b": None}))


def test_gpus_naming_no_device_are_an_error() -> None:
    backend = make_backend(environ=FAKE)
    verify_gpus(backend, config({"a": ("0",), "b": (fake_uuid(1),)}))
    with pytest.raises(GpuError) as info:
        verify_gpus(backend, config({"a": ("0", "7"), "b": ("GPU-nope",), "c": ("1",)}))
    assert str(info.value).splitlines() == [
        f"models.a.gpus: no GPU '7' (GPUs here: 0 ({fake_uuid(0)}), 1 ({fake_uuid(1)}))",
        f"models.b.gpus: no GPU 'GPU-nope' (GPUs here: 0 ({fake_uuid(0)}), 1 ({fake_uuid(1)}))",
    ]


def test_gpus_auto_kept_to_gpus_naming_no_device_is_an_error() -> None:
    backend = make_backend(environ=FAKE)
    kept = msgspec.structs.replace(model("a", None), gpus_auto=True, gpus_allowed=("1", "5"))
    with pytest.raises(GpuError) as info:
        verify_gpus(backend, Config(models={"a": kept}))
    assert str(info.value) == (
        f"models.a.gpus.auto: no GPU '5' (GPUs here: 0 ({fake_uuid(0)}), 1 ({fake_uuid(1)}))"
    )
    fine = msgspec.structs.replace(kept, gpus_allowed=("1", fake_uuid(0)))
    verify_gpus(backend, Config(models={"a": fine}))


def test_resolve_gpus_by_index_and_uuid() -> None:
    devices = make_backend(environ={**FAKE, "SWAPD_FAKE_GPUS": "4"}).devices()
    resolved = resolve_gpus(("2", fake_uuid(0).upper(), "02", " 3 "), devices)
    assert [d.index for d in resolved] == [2, 0, 3]
    canonical = canonical_gpu_ids(devices)
    assert canonical["2"] == canonical[fake_uuid(2).casefold()] == fake_uuid(2).casefold()


def test_gpu_check_script_dry_run(tmp_path: Path) -> None:
    # benchmarks/gpu_check.py is for a real GPU host; a dry run on the fake keeps it working.
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--results", str(tmp_path), "gpu_check", "--quick"],
        cwd=REPO,
        env={**os.environ, "SWAPD_FAKE_GPUS": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "uses 64 MiB" in result.stdout
    assert "wait_released: released" in result.stdout
