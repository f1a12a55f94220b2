"""cmdStop with a docker-like upstream (tests/upstreams/docker_like.py stands for the docker CLI;
there is no docker engine here). Its server is not a child of the command circus runs, and the
container's PID 1 ignores SIGTERM (no --init), so signals to that command cannot stop it: without
cmdStop it lingers after an unload; with cmdStop (`docker stop`, ${PID} filled) it is gone."""

from __future__ import annotations

import os
import uuid

import psutil
import pytest

from tests.stack import (
    PYTHON,
    UPSTREAMS,
    docker_like_force_stop,
    fake_model_cmd,
    http_get,
    wait_for,
)
from tests.test_daemon_lifecycle import _alive, config
from tests.test_daemon_swap import chat

pytestmark = pytest.mark.processes

DOCKER = f"{PYTHON} {UPSTREAMS / 'docker_like.py'}"


def _container_pid(state: str, name: str) -> int:
    with open(os.path.join(state, f"{name}.pid")) as f:
        return int(f.read())


def test_cmd_stop_reaches_a_container_circus_cannot(stack_factory, tmp_path) -> None:
    state = str(tmp_path / "docker-state")
    suffix = uuid.uuid4().hex[:8]
    with_stop, without_stop = f"swapd-boxed-{suffix}", f"swapd-loose-{suffix}"
    stack = stack_factory(
        config(
            {
                "boxed": {
                    "cmd": f"{DOCKER} run --name {with_stop} -- " + fake_model_cmd("boxed"),
                    "cmdStop": f"{DOCKER} stop -t 1 --caller-pid ${{PID}} {with_stop}",
                    "unloadTimeout": 2,
                },
                "loose": {
                    "cmd": f"{DOCKER} run --name {without_stop} -- " + fake_model_cmd("loose"),
                    "unloadTimeout": 1,
                },
            },
            # Both may run at once: this test is about stopping, not swapping.
            groups={"all": {"swap": False, "members": ["boxed", "loose"]}},
        ),
        env={"DOCKER_LIKE_STATE": state},
    )
    try:
        boxed = chat(stack.url, "boxed")["served_by"]
        loose = chat(stack.url, "loose")["served_by"]
        boxed_cli = stack.model("boxed")["pid"]
        # The container (its PID 1 and the server under it) is not the process circus runs (the
        # CLI), nor a descendant of it.
        assert psutil.Process(boxed["pid"]).ppid() == _container_pid(state, with_stop)
        assert psutil.Process(loose["pid"]).ppid() == _container_pid(state, without_stop)
        cli_tree = {p.pid for p in psutil.Process(boxed_cli).children(recursive=True)}
        assert boxed["pid"] not in cli_tree and _container_pid(state, with_stop) not in cli_tree

        stack.swapd("unload", "loose")
        assert stack.model("loose")["state"] == "stopped"
        # Without cmdStop: the CLI got SIGTERM (forwarded to the container's PID 1, which ignores
        # it), then SIGKILL (not forwarded): the container still runs and answers on its port.
        assert _alive(loose["pid"])
        assert http_get(f"http://127.0.0.1:{loose['port']}/health")[0] == 200

        stack.swapd("unload", "boxed")
        assert stack.model("boxed")["state"] == "stopped"
        assert not _alive(boxed["pid"])
        assert f"stop {with_stop} requested for pid {boxed_cli}" in stack.model_log("boxed")
    finally:
        for name in (without_stop, with_stop):
            docker_like_force_stop(name, state)
    wait_for(lambda: not _alive(loose["pid"]), timeout=5, what="the lingering container to go")
