"""Nothing lingers unseen (CONTRACTS C1): a stopped model whose port is still listened on is
reported (daemon log, `swapd status`, `/running`), and its next start waits a bounded time for
the port and then fails with that cause.

The model is `tests/support/upstreams/detached_server.py`, which stands for `docker run` without
`cmdStop` on this machine without docker: the server outlives the process swapd started, as a
container outlives the `docker run` CLI. (The real-docker test lives with the docker tier.)
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request

import psutil
import pytest

from tests.support.daemon import config
from tests.support.stack import PYTHON, UPSTREAMS, http_get, wait_for

pytestmark = pytest.mark.processes

DETACHED = UPSTREAMS / "detached_server.py"


def _post_chat(url: str, model: str) -> tuple[int, dict[str, object]]:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(
        url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_port_left_listening_after_a_stop_is_reported_and_refuses_the_next_start(
    stack_factory,
) -> None:
    stack = stack_factory(
        config({"boxed": {"cmd": f"{PYTHON} {DETACHED} --port ${{PORT}} --name boxed"}}),
        env={"SWAPD_LINGERING_START_WAIT": "2"},
    )
    server_pid: int | None = None
    try:
        status, body = _post_chat(stack.url, "boxed")
        assert status == 200, body
        served = body["served_by"]
        assert isinstance(served, dict)
        server_pid = int(served["pid"])
        port = stack.model("boxed")["port"]
        assert server_pid != stack.model("boxed")["pid"]  # the server is not the process swapd ran

        stack.swapd("unload", "boxed")
        entry = stack.model("boxed")
        assert entry["state"] == "stopped"
        lingering = entry["lingering"]
        assert lingering["port"] == port and lingering["pid"] == server_pid
        assert "detached_server.py" in lingering["command"]
        assert "cmdStop" in lingering["message"]
        text = stack.swapd("status").stdout
        line = next(x for x in text.splitlines() if "lingering" in x)
        assert "boxed" in line and str(port) in line
        code, running = http_get(stack.url + "/running")
        assert code == 200
        listed = json.loads(running)["lingering"]
        assert listed == [
            {
                "model": "boxed",
                "port": port,
                "pid": server_pid,
                "command": lingering["command"],
                "message": lingering["message"],
            }
        ]
        assert f"port {port} is still in use" in stack.output()  # the daemon's WARNING

        status, error = _post_chat(stack.url, "boxed")
        assert status == 502, error
        message = error["error"]["message"]  # type: ignore[index]
        assert f"port {port}" in message and "still in use" in message
        assert "cmdStop" in message and str(server_pid) in message

        # Once the port is free again, the report goes.
        _kill(server_pid)
        server_pid = None
        wait_for(lambda: stack.model("boxed")["lingering"] is None, 10, what="the report to go")
        code, running = http_get(stack.url + "/running")
        assert json.loads(running)["lingering"] == []
    finally:
        if server_pid is not None:
            _kill(server_pid)


def _kill(pid: int) -> None:
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(pid)
        proc.kill()
        proc.wait(5)
