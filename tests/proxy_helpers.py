"""Helpers shared by the proxy's process tests (tests/test_proxy_*.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.stack import FAKE_MODEL, PYTHON, Stack, fake_model_cmd, free_ports, http_get, wait_for


def local_model(name: str, port: int, *extra: str, **keys: Any) -> dict[str, Any]:
    """A config entry running tests/upstreams/fake_model.py (stands for llama-server) on `port`.

    Explicit ports (not ${PORT} from startPort) so parallel test runs never collide."""
    return {
        "cmd": fake_model_cmd(name, *extra, port=str(port)),
        "proxy": f"http://127.0.0.1:{port}",
        **keys,
    }


def model_ports(count: int) -> list[int]:
    return free_ports(count)


@contextmanager
def standalone_upstream(name: str, port: int) -> Iterator[str]:
    """A fake_model process outside swapd, standing in for a remote peer (another llama-swap)."""
    proc = subprocess.Popen(
        [PYTHON, str(FAKE_MODEL), "--port", str(port), "--name", name],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_get(url + "/health", 1.0)[0] == 200, 15, what=f"peer {name} up")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def received(stack: Stack) -> dict[str, int]:
    """How many messages of each type the daemon has received (StatusReply.received)."""
    return dict(stack.status().get("received", {}))


def model_log_has(stack: Stack, model_id: str, text: str, timeout: float = 10.0) -> str:
    return wait_for(
        lambda: text in stack.model_log(model_id) and stack.model_log(model_id),
        timeout,
        what=f"{text!r} in {model_id}'s log",
    )
