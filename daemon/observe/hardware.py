"""`GET /api/hardware`: the inference host as llama-swap's `internal/hw` describes it (its
`HardwareSnapshot`, schema version 1): architecture, operating system, execution environment,
CPU, memory and accelerators. Taken once, when first asked for (llama-swap takes it at start),
and kept: the hardware does not change under a running daemon.

The accelerators are the GPU backend's (NVML: model, architecture, memory, driver, power limit);
the rest is read from the platform, `/proc/cpuinfo`, `/etc/os-release` and the cgroup's memory
limit, each figure `null` where this host does not tell.
"""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from ..machinery.gpu_backend import GpuTelemetry

SCHEMA_VERSION = 1
_ARCHITECTURES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64",
                  "ppc64le": "ppc64le", "riscv64": "riscv64", "s390x": "s390x",
                  "armv7l": "armv7"}  # fmt: skip
_CONTAINERS = {"docker", "lxc", "rkt", "podman", "containerd", "systemd-nspawn"}
_NAMES = {"docker": "Docker", "kvm": "KVM", "vmware": "VMware", "oracle": "VirtualBox",
          "microsoft": "Hyper-V", "lxc": "LXC", "podman": "Podman"}  # fmt: skip


def _text(value: str | None) -> str | None:
    value = (value or "").strip()
    return value if value and value.lower() not in ("n/a", "unknown") else None


def snapshot(gpus: list[GpuTelemetry], *, root: Path = Path("/")) -> dict[str, Any]:
    machine = platform.machine()
    name = _ARCHITECTURES.get(machine.lower(), "other")
    # Always there, as llama-swap's (no omitempty): null when the name says it all.
    arch = {"name": name, "raw_name": machine if machine and name != machine else None}
    try:
        version = importlib.metadata.version("swapd")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {
        "schema_version": SCHEMA_VERSION,
        "captured_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "capture": {
            "scope": "inference_host",
            "method": "detected",
            "detector": {"name": "swapd", "version": version},
        },
        "architecture": arch,
        "operating_system": _operating_system(root),
        "environment": _environment(root),
        "cpu": _cpu(root),
        "memory": {"capacity_bytes": _memory(root)},
        "accelerators": [_accelerator(i, gpu) for i, gpu in enumerate(gpus)],
    }


def _os_release(root: Path) -> dict[str, str]:
    for path in (root / "etc/os-release", root / "usr/lib/os-release"):
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        pairs = (line.partition("=") for line in lines if "=" in line)
        return {k.strip(): v.strip().strip('"') for k, _, v in pairs}
    return {}


def _operating_system(root: Path) -> dict[str, Any]:
    release = _os_release(root)
    system = platform.system().lower()
    family = system if system in ("linux", "windows", "freebsd") else "other"
    out: dict[str, Any] = {
        "family": family,
        "name": _text(release.get("ID")),
        "version": _text(release.get("VERSION_ID")),
        "kernel": _text(platform.release()),
    }
    if family == "other":
        out["raw_family"] = system or None
    return out


def _environment(root: Path) -> dict[str, Any]:
    if "microsoft" in platform.release().lower():
        return {"kind": "wsl", "name": "WSL", "version": None}
    if (root / ".dockerenv").exists():
        return {"kind": "container", "name": "Docker", "version": None}
    if (root / "run/.containerenv").exists():
        return {"kind": "container", "name": "Podman", "version": None}
    detect = shutil.which("systemd-detect-virt")
    if detect is not None:
        try:
            result = subprocess.run([detect], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            return {"kind": "unknown", "name": None, "version": None}
        name = result.stdout.strip()
        if result.returncode == 0 and name and name != "none":
            kind = "container" if name in _CONTAINERS else "virtual_machine"
            return {"kind": kind, "name": _NAMES.get(name, name), "version": None}
        if result.returncode == 1:
            return {"kind": "native", "name": None, "version": None}
    return {"kind": "unknown", "name": None, "version": None}


def _cpu(root: Path) -> dict[str, Any]:
    vendor = model = None
    sockets: set[str] = set()
    try:
        lines = (root / "proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and vendor is None:
            vendor = _text(value)
        elif key in ("model name", "Model") and model is None:
            model = _text(value)
        elif key == "physical id":
            sockets.add(value.strip())
    logical = psutil.cpu_count(logical=True)
    physical = psutil.cpu_count(logical=False)
    if physical and logical and physical > logical:
        physical = None
    return {
        "vendor": vendor,
        "model": model,
        "socket_count": len(sockets) or None,
        "physical_core_count": physical or None,
        "logical_thread_count": logical or None,
    }


def _memory(root: Path) -> int:
    """The memory this host's processes may use: the machine's, or its cgroup's limit if less."""
    total = int(psutil.virtual_memory().total)
    for path in ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = (root / path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total


def _accelerator(index: int, gpu: GpuTelemetry) -> dict[str, Any]:
    total = gpu.mem_total_bytes
    return {
        "index": index,
        "kind": "gpu",
        "vendor": _text(gpu.vendor),
        "model": _text(gpu.name),
        "architecture": _text(gpu.architecture),
        "memory": {"kind": "dedicated" if total else "unknown", "capacity_bytes": total or None},
        "driver": {"name": _text(gpu.vendor), "version": _text(gpu.driver_version)}
        if gpu.driver_version
        else None,
        "power_limit_watts": gpu.power_limit_w or None,
    }
