"""A model process as the daemon knows it (`Running`), and what it is started with: its
environment, its health URL and the hash that says whether a running process still matches its
definition (reload, adoption after a daemon restart)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec

from ...ipc.model_status import LingeringProcess
from ..config import ModelConfig

# Variables of swapd's own environment that must not reach model processes.
_PRIVATE_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "CIRCUSCTL_ENDPOINT")

ENV_MODEL_ID = "SWAPD_MODEL_ID"
ENV_PORT = "SWAPD_PORT"
ENV_HASH = "SWAPD_MODEL_HASH"


@dataclass
class Running:
    """A model process circus runs for us."""

    model: str
    pid: int
    upstream: str
    port: int | None
    gpus: tuple[str, ...]
    started_at: float  # wall clock
    definition: str  # definition_hash() of the config it was started with
    lingering: tuple[LingeringProcess, ...] = field(default=())


def definition_hash(model: ModelConfig) -> str:
    """What decides whether a running process still matches its config (reload, adoption)."""
    relevant = (
        model.cmd,
        model.cmd_stop,
        model.proxy,
        model.check_endpoint,
        sorted(model.env.items()),
        # A placed model's GPUs change from start to start; its definition does not.
        None if model.gpus_auto else model.gpus,
        model.gpus_auto,
        model.port,
    )
    return hashlib.sha256(msgspec.json.encode(relevant)).hexdigest()[:16]


def health_url(model: ModelConfig) -> str | None:
    if model.check_endpoint is None:
        return None
    path = (
        model.check_endpoint if model.check_endpoint.startswith("/") else "/" + model.check_endpoint
    )
    return model.proxy.rstrip("/") + path


def fill_gpus(argv: tuple[str, ...], model: ModelConfig) -> tuple[str, ...]:
    """A `gpus: auto` model's `${GPUS}`, filled with the GPUs this start was placed on."""
    if not model.gpus_auto:
        return argv
    gpus = ",".join(model.gpus or ())
    return tuple(arg.replace("${GPUS}", gpus) for arg in argv)


def model_env(model: ModelConfig, base: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in _PRIVATE_ENV}
    env.update(zip(model.env, fill_gpus(tuple(model.env.values()), model), strict=True))
    if model.gpus and "CUDA_VISIBLE_DEVICES" not in model.env:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(model.gpus)
    env[ENV_MODEL_ID] = model.id
    env[ENV_HASH] = definition_hash(model)
    if model.port is not None:
        env[ENV_PORT] = str(model.port)
    return env


def fill_pid(argv: tuple[str, ...], pid: int) -> list[str]:
    return [arg.replace("${PID}", str(pid)) for arg in argv]
