"""Placement by memory through the real stack: fake GPUs of a given size, configs, and what the
daemon learned of a model's footprint."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from swapd.daemon.machinery.gpu_fake import fake_uuid
from tests.support.stack import fake_model_cmd, free_port_range, wait_for

GIB = 1024**3


def gpu_env(total_gib: int, state: Path | None = None) -> dict[str, str]:
    mem_dir = tempfile.mkdtemp(prefix="swapd-gpumem-", dir="/tmp")
    env = {
        "SWAPD_GPU_BACKEND": "fake",
        "SWAPD_FAKE_GPUS": json.dumps([{"name": "Fake 0", "total_bytes": total_gib * GIB}]),
        "SWAPD_FAKE_GPU_MEM_DIR": mem_dir,
    }
    if state is not None:
        env["STATE_DIRECTORY"] = str(state)
    return env


def config(models: dict[str, dict[str, object]]) -> dict[str, object]:
    built = {}
    for mid, spec in models.items():
        spec = dict(spec)
        mem = spec.pop("mem_gib")
        built[mid] = {
            "cmd": fake_model_cmd(mid, "--gpu-mem", str(int(mem * GIB))),  # type: ignore[operator]
            "proxy": "http://127.0.0.1:${PORT}",
            "unloadTimeout": 3,
            "gpus": "auto",
            **spec,
        }
    # Below the ephemeral range: a client socket could take a model's port up there.
    return {"healthCheckTimeout": 15, "startPort": free_port_range(len(built)), "models": built}


def states(stack) -> dict[str, dict[str, object]]:
    return {m["model"]: m for m in stack.status()["models"]}


def learned(stack, model: str, gib: float) -> dict[str, object]:
    """Wait until the daemon's sampling learned `gib` for `model` on fake GPU 0."""
    key = fake_uuid(0).casefold()
    return wait_for(
        lambda: (m := states(stack)[model])["footprint"].get(key) == int(gib * GIB) and m,
        timeout=15,
        what=f"{model}'s footprint of {gib} GiB",
    )
