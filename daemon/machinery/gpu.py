"""GPUs: the backend interface, choosing a backend, resolving `gpus` specs, waiting for release.

The daemon reads GPUs only through a `GpuBackend`:

* `NvmlBackend` (`gpu_nvml.py`): the real thing, nvidia-ml-py;
* `FakeBackend` (`gpu_fake.py`): stands for NVML in tests on machines without a GPU
  (`SWAPD_GPU_BACKEND=fake`); it reports the daemon's real child processes as GPU users;
* `NullBackend`: no NVML on this host; no inventory, nothing to wait for.

Backends are synchronous (NVML calls are blocking C calls of a few ms); the async helpers here run
them in a worker thread so the daemon's event loop never blocks on the driver.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Collection, Iterable, Mapping

from ...ipc.model_status import GpuInfo, LingeringProcess
from ..config import Config
from ..errors import GpuError
from .gpu_backend import GpuBackend, GpuProcess, NullBackend
from .gpu_fake import FakeBackend
from .gpu_nvml import NvmlBackend

__all__ = ["GpuBackend", "GpuError", "GpuProcess", "NullBackend", "make_backend"]

log = logging.getLogger("swapd.gpu")

BACKEND_ENV = "SWAPD_GPU_BACKEND"
MODES = ("auto", "nvml", "fake", "none")


def make_backend(
    mode: str | None = None, *, environ: Mapping[str, str] | None = None
) -> GpuBackend:
    """The backend for `mode`: 'nvml' (fails hard), 'fake', 'none', or 'auto'.

    'auto' (the default) takes `$SWAPD_GPU_BACKEND` when set, else NVML; when NVML cannot start it
    logs ONE line and returns a `NullBackend` remembering why. Call `verify_gpus` next: it turns
    a broken NVML into an error when the config names GPUs.
    """
    env = os.environ if environ is None else environ
    if mode is None or mode == "auto":
        mode = env.get(BACKEND_ENV) or "auto"
    if mode not in MODES:
        raise GpuError(f"unknown GPU backend {mode!r} (valid: {', '.join(MODES)})")
    if mode == "fake":
        return FakeBackend.from_env(env)
    if mode == "none":
        return NullBackend("GPU backend disabled")

    if mode == "nvml":
        return NvmlBackend()
    try:
        return NvmlBackend()
    except GpuError as exc:
        if exc.library_missing:
            log.warning("%s: no GPU inventory; GPU release after a stop is not checked", exc)
        else:
            log.error("%s: GPU inventory and release checks are off", exc)
        return NullBackend(str(exc), broken=not exc.library_missing)


def _matches(spec: str, device: GpuInfo) -> bool:
    text = spec.strip()
    if text.isdecimal():
        return int(text) == device.index
    return text.casefold() == device.uuid.casefold()


def resolve_gpus(spec: Iterable[str], devices: Collection[GpuInfo]) -> list[GpuInfo]:
    """The devices a `gpus` list names (indices or UUIDs), in order, without repeats."""
    result: list[GpuInfo] = []
    for item in spec:
        found = next((d for d in devices if _matches(item, d)), None)
        if found is None:
            have = ", ".join(f"{d.index} ({d.uuid})" for d in devices) or "none"
            raise GpuError(f"no GPU {item!r} (GPUs here: {have})")
        if found not in result:
            result.append(found)
    return result


def canonical_gpu_ids(devices: Iterable[GpuInfo]) -> dict[str, str]:
    """Every spelling of each device (index, UUID) -> one id, for the eviction policies."""
    result: dict[str, str] = {}
    for device in devices:
        canonical = device.uuid.casefold()
        result[str(device.index)] = canonical
        result[canonical] = canonical
    return result


def verify_gpus(backend: GpuBackend, config: Config) -> None:
    """Check, at daemon start and on reload, that the config's `gpus` can be honoured.

    Raises GpuError (every problem, one per line) when models name GPUs but NVML is present and
    broken (driver not loaded, no permission), or when a `gpus` entry names no GPU of the
    inventory. Without NVML at all, `make_backend` already logged its one line and the GPUs are
    passed to the models unchecked.
    """
    users = {(mid, "gpus"): m.gpus for mid, m in config.models.items() if m.gpus}
    # `gpus: {auto: [...]}` (placement by memory, kept to those GPUs).
    users.update(
        {(mid, "gpus.auto"): m.gpus_allowed for mid, m in config.models.items() if m.gpus_allowed}
    )
    if not users:
        return
    if isinstance(backend, NullBackend):
        if backend.broken:
            raise GpuError(
                f"{backend.reason}; models {', '.join(sorted({m for m, _ in users}))} set `gpus`, "
                "which needs "
                "a working NVML (fix the driver, or remove `gpus`)"
            )
        return
    devices = backend.devices()
    problems = []
    for (mid, key), spec in sorted(users.items()):
        try:
            resolve_gpus(spec, devices)
        except GpuError as exc:
            problems.append(f"models.{mid}.{key}: {exc}")
    if problems:
        raise GpuError("\n".join(problems))


async def read_devices(backend: GpuBackend) -> list[GpuInfo]:
    return await asyncio.to_thread(backend.devices)


async def read_processes(backend: GpuBackend) -> list[GpuProcess]:
    return await asyncio.to_thread(backend.processes)


def _on_gpus(proc: GpuProcess, gpus: Collection[str] | None) -> bool:
    if gpus is None:
        return True
    for spec in gpus:
        text = spec.strip()
        if text.isdecimal() and int(text) == proc.gpu_index:
            return True
        if text.casefold() == proc.gpu_uuid.casefold():
            return True
    return False


def held_by(
    procs: Iterable[GpuProcess],
    pids: Collection[int] | None,
    gpus: Collection[str] | None,
    ignore_pids: Collection[int],
) -> list[LingeringProcess]:
    """What `pids` hold on `gpus` (`pids` None: any process but `ignore_pids`; `gpus` None:
    every GPU), one entry per process and GPU."""
    return [
        LingeringProcess(gpu=p.gpu_uuid, pid=p.pid, used_bytes=p.used_bytes)
        for p in procs
        if (p.pid in pids if pids is not None else p.pid not in ignore_pids) and _on_gpus(p, gpus)
    ]


async def wait_released(
    backend: GpuBackend,
    pids: Collection[int] | None,
    gpus: Collection[str] | None,
    timeout: float,
    poll: float = 0.05,
    *,
    ignore_pids: Collection[int] = (),
) -> list[LingeringProcess]:
    """Wait until none of `pids` holds memory on any of `gpus`; return what still does.

    `pids` None means any process but `ignore_pids` (a docker model, whose processes are not the
    daemon's children; ignore the processes of models that share its GPUs and keep running);
    `gpus` None means every GPU (a model without `gpus`). Returns [] as soon as NVML
    shows them released, else what lingers when `timeout` seconds have passed. An NVML failure
    while polling raises GpuError.
    """
    if isinstance(backend, NullBackend):
        return []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            procs = await read_processes(backend)
        except GpuError:
            raise
        except Exception as exc:
            raise GpuError(f"reading GPU processes failed: {type(exc).__name__}: {exc}") from exc
        lingering = held_by(procs, pids, gpus, ignore_pids)
        if not lingering:
            return []
        remaining = deadline - loop.time()
        if remaining <= 0:
            return lingering
        await asyncio.sleep(min(poll, remaining))
