"""A stand-in for the docker CLI where a real engine cannot do the job: `docker run --gpus`.

Container models run on a real docker engine in tests/real/test_docker.py. What that engine
cannot do here is give a container a GPU (no GPU, no NVIDIA runtime), so the one test that needs a
container on (fake) GPUs, tests/stack/test_daemon_gpus.py, runs this instead: it passes the caller's
environment (CUDA_VISIBLE_DEVICES) to the "container", where the fake NVML backend sees it, as
`docker run --gpus` makes a real container show up in NVML.

`docker_like.py run --name NAME -- CMD...` behaves like an attached `docker run`: the container is
NOT a child of this command. A detached init (double fork + setsid, the way dockerd and
containerd-shim detach containers from the CLI) becomes the container's PID 1 and runs CMD as its
child. Like a PID 1 without a signal handler (no `--init`), it ignores SIGTERM. This command only
waits for the container, forwards SIGTERM and SIGINT to its PID 1 (`--sig-proxy=true`; SIGKILL
cannot be forwarded, so killing this command leaves the container running), and exits with its
exit code.

`docker_like.py stop [-t N] NAME` behaves like `docker stop`: SIGTERM to the container's PID 1,
then after N seconds (default 10) SIGKILL to every process of the container (its process group
stands for the container's cgroup), and returns once it is gone.

State (pid and exit-code files) lives in $DOCKER_LIKE_STATE, else /tmp/docker-like-<uid>.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path


def state_dir() -> Path:
    path = Path(os.environ.get("DOCKER_LIKE_STATE") or f"/tmp/docker-like-{os.getuid()}")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def pid_file(name: str) -> Path:
    return state_dir() / f"{name}.pid"


def exit_file(name: str) -> Path:
    return state_dir() / f"{name}.exit"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def container_pid(name: str) -> int | None:
    try:
        pid = int(pid_file(name).read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def _init(name: str, argv: list[str]) -> None:
    """The container's PID 1, detached from the CLI: runs CMD, waits, records the exit code."""
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execvp(argv[0], argv)
    tmp = pid_file(name).with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    tmp.replace(pid_file(name))
    _, status = os.waitpid(child, 0)
    exit_file(name).write_text(str(os.waitstatus_to_exitcode(status)))
    pid_file(name).unlink(missing_ok=True)


def run(name: str, argv: list[str]) -> int:
    if container_pid(name) is not None:
        print(
            f"docker_like: Conflict. The container name {name!r} is already in use", file=sys.stderr
        )
        return 125
    exit_file(name).unlink(missing_ok=True)
    pid_file(name).unlink(missing_ok=True)
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        try:
            _init(name, argv)
        finally:
            os._exit(0)
    os.waitpid(first, 0)

    deadline = time.monotonic() + 10
    while (pid := container_pid(name)) is None:
        if exit_file(name).exists():
            return int(exit_file(name).read_text() or 1)
        if time.monotonic() > deadline:
            print("docker_like: container did not start", file=sys.stderr)
            return 125
        time.sleep(0.01)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    print(f"docker_like: container {name} running as pid {pid}", flush=True)
    while alive(pid):
        time.sleep(0.05)
    for _ in range(40):
        if exit_file(name).exists():
            return int(exit_file(name).read_text() or 0)
        time.sleep(0.01)
    return 0


def stop(name: str, timeout: float) -> int:
    pid = container_pid(name)
    if pid is None:
        print(f"Error response from daemon: No such container: {name}", file=sys.stderr)
        return 1
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if alive(pid):
        # The whole container goes, as when the kernel tears down a pid namespace.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.02)
    print(name, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docker_like.py", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run")
    run_p.add_argument("--name", required=True)
    run_p.add_argument("argv", nargs=argparse.REMAINDER)
    stop_p = sub.add_parser("stop")
    stop_p.add_argument("-t", "--time", type=float, default=10.0)
    stop_p.add_argument("--caller-pid", type=int, help="logged, to show what ${PID} became")
    stop_p.add_argument("name")
    args = parser.parse_args(argv)
    if args.command == "run":
        command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if not command:
            parser.error("run needs a command after --")
        return run(args.name, command)
    if args.caller_pid is not None:
        print(f"docker_like: stop {args.name} requested for pid {args.caller_pid}", flush=True)
    return stop(args.name, args.time)


if __name__ == "__main__":
    sys.exit(main())
