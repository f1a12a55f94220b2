"""Container models on a real docker engine, as the seed page runs ComfyUI.

The engine is a private real `dockerd` (tests/support/realparts/docker_engine.py); the image is
busybox with a page, made on the spot (no registry is reachable, and `--pull never` makes sure none
is tried); `busybox httpd` stands in for ComfyUI's web server only in what it serves. Everything
about the container is real: `docker run --rm --name ...` is a client of the engine, the container
is the engine's child, not the client's, and busybox as PID 1 ignores SIGTERM, as many real images
do. Containers always use `--network host`, so the model listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import signal
from typing import Any

import psutil
import pytest

from tests.support.realparts.docker_engine import DockerEngine
from tests.support.realparts.images import PAGE
from tests.support.stack import Stack, free_port_range, http_get, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.docker]

# CONTRACTS C1 (the lingering-port report) lands with the daemon's house issue.


HTTPD = "httpd -f -p 127.0.0.1:${PORT} -h /www"


def container_model(
    engine: DockerEngine,
    image: str,
    model_id: str,
    *,
    name: str = "${MODEL_ID}",
    cmd_stop: bool = True,
    unload_timeout: int = 30,
    command: str = HTTPD,
    extra: str = "",
) -> str:
    """A model block in the seed page's shape: `docker run --rm --name NAME` and `docker stop`."""
    stop = f"    cmdStop: {engine.docker} stop -t 2 {name}\n" if cmd_stop else ""
    return f"""
  {model_id}:
    # busybox httpd has no /health; its root returns 200 once the server is up
    checkEndpoint: /
{stop}    cmd: >
      {engine.docker} run --rm --pull never
      --name {name} --network host
      {image} {command}
    unloadTimeout: {unload_timeout}
    ttl: 600
    unlisted: true
{extra}"""


def top() -> str:
    # Ports of their own: other test runs on this machine start stacks at the same time.
    return f"healthCheckTimeout: 60\nstartPort: {free_port_range(4)}\nmodels:"


def comfyui_config(engine: DockerEngine, image: str, **kw: Any) -> str:
    return top() + container_model(engine, image, "comfyui_auto", name="comfyui-auto", **kw)


def start(stack_factory: Any, engine: DockerEngine, config: str) -> Stack:
    return stack_factory(config, env=engine.env)  # type: ignore[no-any-return]


def running_names(engine: DockerEngine) -> list[str]:
    return sorted(c["Names"] for c in engine.containers() if c["State"] == "running")


def test_container_serves_comfyui_then_is_gone_after_a_swap(
    docker: DockerEngine, busybox_image: str, stack_factory: Any
) -> None:
    config = comfyui_config(docker, busybox_image) + container_model(docker, busybox_image, "other")
    stack = start(stack_factory, docker, config)

    status, body = http_get(stack.url + "/comfyui/", timeout=60)
    assert (status, body.decode()) == (200, PAGE)
    assert running_names(docker) == ["comfyui-auto"]
    port = stack.model("comfyui_auto")["port"]
    assert http_get(f"http://127.0.0.1:{port}/") == (200, PAGE.encode())

    since = docker.cli("info", "--format", "{{.SystemTime}}").stdout.strip()
    status, body = http_get(stack.url + "/upstream/other/", timeout=60)
    assert (status, body.decode()) == (200, PAGE)
    assert stack.model("comfyui_auto")["state"] == "stopped"
    # cmdStop's `docker stop -t 2`: SIGTERM, which busybox as PID 1 ignores, then SIGKILL once
    # the 2 s ran out; --rm removed the container.
    assert docker.container_names() == ["other"]
    now = docker.cli("info", "--format", "{{.SystemTime}}").stdout.strip()
    events = docker.cli(
        "events", "--since", since, "--until", now, "--filter", "container=comfyui-auto",
        "--format", "{{.Action}} {{index .Actor.Attributes \"signal\"}}",
    ).stdout.split("\n")  # fmt: skip
    actions = [
        e.replace("<no value>", "").strip()
        for e in events
        if e.startswith(("kill", "die", "destroy"))
    ]
    assert actions == ["kill 15", "kill 9", "die", "destroy"], events


def left_running(stack_factory: Any, docker: DockerEngine, image: str) -> tuple[Stack, int]:
    """comfyui_auto without cmdStop, served once and unloaded; returns the stack and its port."""
    config = comfyui_config(docker, image, cmd_stop=False, unload_timeout=2)
    stack = start(stack_factory, docker, config)
    assert http_get(stack.url + "/comfyui/", timeout=60)[0] == 200
    port = int(stack.model("comfyui_auto")["port"])
    stack.swapd("unload", "comfyui_auto")
    stack.wait_state("comfyui_auto", "stopped", timeout=30)
    return stack, port


def test_without_cmdstop_the_container_outlives_the_stop(
    docker: DockerEngine, busybox_image: str, stack_factory: Any
) -> None:
    _, port = left_running(stack_factory, docker, busybox_image)
    # swapd SIGKILLed its `docker run` client after unloadTimeout; the container is the engine's.
    assert running_names(docker) == ["comfyui-auto"]
    assert http_get(f"http://127.0.0.1:{port}/") == (200, PAGE.encode())


def test_without_cmdstop_swapd_reports_the_lingering_port_and_the_next_start_fails(
    docker: DockerEngine, busybox_image: str, stack_factory: Any
) -> None:
    stack, port = left_running(stack_factory, docker, busybox_image)

    def lingering() -> list[dict[str, Any]]:
        status, body = http_get(stack.url + "/running")
        assert status == 200
        return list(json.loads(body)["lingering"])

    (entry,) = wait_for(lingering, timeout=15, what="the lingering report in /running")
    assert (entry["model"], entry["port"]) == ("comfyui_auto", port)
    # The listener is the container's busybox, seen from the host's pid namespace.
    assert entry["command"] and "httpd" in entry["command"]
    printed = stack.swapd("status").stdout
    line = next(ln for ln in printed.splitlines() if "lingering" in ln)
    assert "comfyui_auto" in line and str(port) in line

    status, body = http_get(stack.url + "/comfyui/", timeout=60)
    assert status == 502, body
    message = json.loads(body)["error"]["message"]
    for part in (f"port {port}", "still in use", "cmdStop"):
        assert part in message, message

    # Gone for real, the report clears and the model starts again.
    docker.remove_containers(["comfyui-auto"])
    wait_for(lambda: not lingering(), timeout=30, what="the lingering report to clear")
    assert http_get(stack.url + "/comfyui/", timeout=60) == (200, PAGE.encode())


def test_model_id_container_names_let_two_models_run_side_by_side(
    docker: DockerEngine, busybox_image: str, stack_factory: Any
) -> None:
    config = (
        top()
        + container_model(docker, busybox_image, "comfy-a")
        + container_model(docker, busybox_image, "comfy-b")
        + "groups:\n  side-by-side:\n    swap: false\n    members: [comfy-a, comfy-b]\n"
    )
    stack = start(stack_factory, docker, config)
    for model_id in ("comfy-a", "comfy-b"):
        assert http_get(f"{stack.url}/upstream/{model_id}/", timeout=60) == (200, PAGE.encode())
    assert running_names(docker) == ["comfy-a", "comfy-b"]
    ports = {stack.model(m)["port"] for m in ("comfy-a", "comfy-b")}
    assert len(ports) == 2
    for port in ports:
        assert http_get(f"http://127.0.0.1:{port}/") == (200, PAGE.encode())

    stack.swapd("unload")
    for model_id in ("comfy-a", "comfy-b"):
        stack.wait_state(model_id, "stopped", timeout=30)
    assert docker.container_names() == []


def test_the_container_is_the_engines_child_not_the_clients(
    docker: DockerEngine, busybox_image: str, stack_factory: Any
) -> None:
    """Why `cmdStop` matters: the process circus runs is only the `docker run` client."""
    stack = start(stack_factory, docker, comfyui_config(docker, busybox_image))
    assert http_get(stack.url + "/comfyui/", timeout=60)[0] == 200
    client = psutil.Process(stack.model("comfyui_auto")["pid"])
    assert client.cmdline()[:2] == [docker.docker, "run"]
    pid_1 = int(docker.cli("inspect", "-f", "{{.State.Pid}}", "comfyui-auto").stdout)
    assert pid_1 not in {p.pid for p in client.children(recursive=True)}
    assert psutil.Process(pid_1).parent().name().startswith("containerd-shim")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_swapd_shutdown_leaves_no_container_behind(
    docker: DockerEngine, busybox_image: str, stack_factory: Any, tmp_path: Any, signum: int
) -> None:
    # Beside the container, a plain (not containerised) busybox httpd on the host.
    plain = f"""
  plain:
    checkEndpoint: /
    cmd: /bin/busybox httpd -f -p 127.0.0.1:${{PORT}} -h {tmp_path}
groups:
  all:
    swap: false
    members: [comfyui_auto, plain]
"""
    (tmp_path / "index.html").write_text(PAGE)
    stack = start(stack_factory, docker, comfyui_config(docker, busybox_image, extra=plain))
    assert http_get(stack.url + "/comfyui/", timeout=60)[0] == 200
    assert http_get(stack.url + "/upstream/plain/", timeout=60) == (200, PAGE.encode())
    assert running_names(docker) == ["comfyui-auto"]
    plain_pid = stack.model("plain")["pid"]

    assert stack.proc is not None
    stack.proc.send_signal(signum)
    assert stack.proc.wait(60) == 0
    assert docker.container_names() == []
    assert not psutil.pid_exists(plain_pid) or psutil.Process(plain_pid).status() == "zombie"
    assert stack.processes() == []


def test_shutdown_while_a_container_starts_runs_its_cmdstop(
    docker: DockerEngine, busybox_image: str, stack_factory: Any
) -> None:
    slow = 'sh -c "sleep 120; exec httpd -f -p 127.0.0.1:${PORT} -h /www"'
    config = comfyui_config(
        docker, busybox_image, command=slow,
        extra="hooks:\n  on_startup:\n    preload: [comfyui_auto]\n",
    )  # fmt: skip
    stack = start(stack_factory, docker, config)
    stack.wait_state("comfyui_auto", "starting", timeout=30)
    wait_for(lambda: running_names(docker) == ["comfyui-auto"], timeout=30, what="the container")

    assert stack.proc is not None
    stack.proc.send_signal(signal.SIGTERM)
    assert stack.proc.wait(60) == 0
    # circusd's SIGTERM reached only the client (forwarded to a PID 1 that ignores it).
    assert docker.container_names() == [], "a starting model's cmdStop did not run at shutdown"


def test_a_container_killed_from_outside_is_seen_and_started_again(
    docker: DockerEngine, busybox_image: str, stack_factory: Any
) -> None:
    """`docker kill` goes around swapd; the `docker run` client exits with the container's code."""
    stack = start(stack_factory, docker, comfyui_config(docker, busybox_image))
    assert http_get(stack.url + "/comfyui/", timeout=60)[0] == 200
    first_client = stack.model("comfyui_auto")["pid"]

    docker.cli("kill", "comfyui-auto")
    stopped = stack.wait_state("comfyui_auto", "stopped", timeout=30)
    assert "exit code 137" in stopped["reason"], stopped  # 128 + SIGKILL, passed on by the client
    assert docker.container_names() == []

    assert http_get(stack.url + "/comfyui/", timeout=60) == (200, PAGE.encode())
    assert stack.model("comfyui_auto")["pid"] != first_client
    # Seen once in a full run: none running here after the 200; the listing says how it ended.
    listing = [(c["Names"], c["State"], c["Status"]) for c in docker.containers()]
    assert running_names(docker) == ["comfyui-auto"], (listing, stack.model("comfyui_auto"))


def test_a_container_that_exits_at_start_gives_its_exit_code_and_dockers_error(
    docker: DockerEngine, stack_factory: Any
) -> None:
    stack = start(stack_factory, docker, comfyui_config(docker, "swapd-test/no-such-image:1"))
    status, body = http_get(stack.url + "/comfyui/", timeout=60)
    assert status == 502, body
    error = json.loads(body)["error"]
    assert "exit code 125" in error["message"], error
    assert "No such image: swapd-test/no-such-image:1" in "\n".join(error["log_tail"]), error
    assert stack.model("comfyui_auto")["state"] == "failed"
    assert docker.container_names() == []
