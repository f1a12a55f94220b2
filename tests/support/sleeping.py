"""Shared pieces of the sleep and wake process tests (`test_sleep*.py`) and the sleep benchmark:
configs that run the vLLM stand-in (`tests/support/upstreams/vllm_like.py`: vLLM needs a GPU),
the fake GPUs it reports its memory on, and the calls its request log recorded."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from tests.support.stack import PYTHON, UPSTREAMS, fake_model_cmd, free_port_range

VLLM_LIKE = UPSTREAMS / "vllm_like.py"
GIB = 1024**3
MIB = 1024**2


def gpu_env(total_gib: int = 80) -> dict[str, str]:
    """A stack's environment with one fake GPU of `total_gib` that reports what each model
    declares it holds (SWAPD_FAKE_GPU_MEM_DIR)."""
    mem_dir = tempfile.mkdtemp(prefix="swapd-gpumem-", dir="/tmp")
    return {
        "SWAPD_GPU_BACKEND": "fake",
        "SWAPD_FAKE_GPUS": json.dumps([{"name": "Fake 0", "total_bytes": total_gib * GIB}]),
        "SWAPD_FAKE_GPU_MEM_DIR": mem_dir,
    }


def vllm_cmd(name: str, log: Path, *extra: str) -> str:
    """A `cmd` that runs the vLLM stand-in as `vllm serve` would run (`--enable-sleep-mode` is
    there only for the preset's check: the stand-in always has its sleep endpoints)."""
    return " ".join(
        [PYTHON, str(VLLM_LIKE), "--port", "${PORT}", "--name", name, "--request-log", str(log),
         "--enable-sleep-mode", *extra]
    )  # fmt: skip


def vllm_model(
    name: str, log: Path, *extra: str, sleep: Any = "vllm", **fields: Any
) -> dict[str, Any]:
    return {
        "cmd": vllm_cmd(name, log, *extra),
        "env": ["VLLM_SERVER_DEV_MODE=1"],
        "proxy": "http://127.0.0.1:${PORT}",
        "unloadTimeout": 3,
        "gpus": [0],
        "sleep": sleep,
        **fields,
    }


def plain_model(name: str, **fields: Any) -> dict[str, Any]:
    """A model without a sleep setting (the llama-server stand-in), stopped as always."""
    return {
        "cmd": fake_model_cmd(name),
        "proxy": "http://127.0.0.1:${PORT}",
        "unloadTimeout": 3,
        "gpus": [0],
        **fields,
    }


def config(models: dict[str, dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {
        "healthCheckTimeout": 30,
        "startPort": free_port_range(max(len(models), 1)),
        **top,
        "models": models,
    }


def calls(log: Path) -> list[dict[str, Any]]:
    """What the stand-ins recorded, in order (start, loaded, sleep, asleep, wake_up, ...)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def events(log: Path, name: str) -> list[str]:
    return [c["event"] for c in calls(log) if c["name"] == name]
