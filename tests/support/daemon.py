"""A stack's config, a chat request through its proxy, an `Ensure` straight to its daemon, and
whether a pid is alive: what the process tests of the daemon share."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from swapd.ipc.client import DaemonClient
from swapd.ipc.endpoints import Endpoints
from swapd.ipc.messages import Ensure
from tests.support.stack import free_port_range


def chat(url: str, model: str, text: str = "hi", timeout: float = 30.0) -> dict[str, Any]:
    """One chat completion through the proxy at `url`; its answer, which must be a 200."""
    message = {"role": "user", "content": text}
    body = json.dumps({"model": model, "messages": [message]}).encode()
    request = urllib.request.Request(
        url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        assert response.status == 200, response.status
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def config(models: dict[str, dict[str, object]], **top: object) -> dict[str, object]:
    defaults = {"proxy": "http://127.0.0.1:${PORT}", "unloadTimeout": 3}
    return {
        "healthCheckTimeout": 15,
        "startPort": free_port_range(len(models)),
        **top,
        "models": {mid: {**defaults, **spec} for mid, spec in models.items()},
    }


async def ensure(run_dir: os.PathLike[str], model: str, timeout: float = 30.0) -> object:
    client = DaemonClient(Endpoints(run_dir).daemon)
    try:
        return await client.request(lambda i: Ensure(id=i, model=model), timeout=timeout)
    finally:
        client.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
