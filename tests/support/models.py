"""Model configs and a settable clock for the tests that run swapd's parts without processes."""

from __future__ import annotations

from typing import Any

from swapd.daemon.config import ModelConfig


def model(mid: str, gpus: tuple[str, ...] | None = None, **fields: Any) -> ModelConfig:
    """A model whose process is never started: what the scheduler, the eviction policies and the
    placement read of it (`fields` overrides any of `ModelConfig`'s)."""
    base: dict[str, Any] = {
        "cmd": ("server", mid),
        "cmd_stop": None,
        "proxy": f"http://127.0.0.1:1/{mid}",
        "check_endpoint": "/health",
        "ttl": 0,
        "unload_timeout": 1,
        "health_check_timeout": 15,
        "concurrency_limit": 10,
        "gpus": gpus,
    }
    return ModelConfig(id=mid, **{**base, **fields})


class Clock:
    """A monotonic clock the test moves by hand (`clock.now += 5`)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
