"""A private, real docker engine for tests: `dockerd` on its own socket and directories.

`DockerEngine().start()` runs Debian's `dockerd` as root with
`--storage-driver=vfs --bridge=none --iptables=false --ip6tables=false` and `-H unix://DIR/docker.sock`,
`--data-root DIR/data`, `--exec-root DIR/exec`, `--pidfile DIR/docker.pid` under a fresh private
directory, so it neither needs nor touches the machine's own docker (if any), parallel test runs
each have their own, and nothing it does reaches a network: there is no bridge, and tests run their
containers with `--network host` on loopback addresses only. `stop()` removes every container,
stops dockerd (and the containerd it manages), unmounts what it left mounted and deletes the
directory.

No registry is reachable, so images are made on the spot: `import_image(rootfs, tag, changes)` is
`docker import` of a directory tree (see `tests/support/realparts/images.py` for a busybox one).
`cli(*args)` runs the docker CLI against this engine; `env` is the environment a process (a
swapd model's `docker run`) needs to reach it (`DOCKER_HOST`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil

# Generous: dockerd's first start initialises its data root, and the machine's 2 cores are shared.
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0


class EngineUnavailable(RuntimeError):
    """This machine cannot run the engine (no dockerd, not root): a reason, not a crash."""


def find_cli() -> str | None:
    """The docker CLI: Debian's (`docker.io`, the engine's own version) first, else any on PATH."""
    debian = Path("/usr/bin/docker")
    if debian.exists():
        return str(debian)
    return shutil.which("docker")


def find_dockerd() -> str | None:
    return shutil.which("dockerd") or next(
        (str(p) for p in (Path("/usr/sbin/dockerd"), Path("/usr/bin/dockerd")) if p.exists()),
        None,
    )


def unavailable_reason() -> str | None:
    """Why `DockerEngine` cannot start here, or None when it can try."""
    if os.geteuid() != 0:
        return "dockerd must run as root and this is not root"
    if find_dockerd() is None:
        return "dockerd is not installed (Debian package docker.io)"
    if find_cli() is None:
        return "the docker CLI is not installed (Debian package docker.io)"
    return None


class DockerEngine:
    """One private dockerd. Use as a context manager, or `start()` / `stop()`."""

    def __init__(self, base: Path | None = None) -> None:
        # Short, under /tmp: containerd's sockets live under the exec root (sun_path is 108 bytes).
        self.base = base or Path(tempfile.mkdtemp(prefix="swapd-dk-", dir="/tmp"))
        self.base.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.socket_path = self.base / "docker.sock"
        self.data_root = self.base / "data"
        self.exec_root = self.base / "exec"
        self.pidfile = self.base / "docker.pid"
        self.log_path = self.base / "dockerd.log"
        self.host = f"unix://{self.socket_path}"
        self.docker = find_cli() or "docker"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """What a process needs in its environment to talk to this engine."""
        return {"DOCKER_HOST": self.host}

    # ---------------------------------------------------------------------------- start

    def argv(self) -> list[str]:
        return [
            find_dockerd() or "dockerd",
            "--storage-driver=vfs",
            "--bridge=none",
            "--iptables=false",
            "--ip6tables=false",
            "-H", self.host,
            "--data-root", str(self.data_root),
            "--exec-root", str(self.exec_root),
            "--pidfile", str(self.pidfile),
        ]  # fmt: skip

    def start(self, timeout: float = START_TIMEOUT) -> DockerEngine:
        reason = unavailable_reason()
        if reason is not None:
            raise EngineUnavailable(reason)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self._ping():
            if self.proc.poll() is not None:
                log_tail = self.log_tail()
                self.stop()
                raise EngineUnavailable(
                    f"dockerd exited with {self.proc.returncode} at start:\n{log_tail}"
                )
            if time.monotonic() > deadline:
                log_tail = self.log_tail()
                self.stop()
                raise EngineUnavailable(f"dockerd did not answer within {timeout}s:\n{log_tail}")
            time.sleep(0.1)
        return self

    def _ping(self) -> bool:
        """GET /_ping on the engine's socket: "OK" once the API serves."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(2.0)
                sock.connect(str(self.socket_path))
                sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
                answer = b""
                while chunk := sock.recv(4096):
                    answer += chunk
        except OSError:
            return False
        return answer.startswith(b"HTTP/1.") and b" 200 " in answer.split(b"\r\n", 1)[0]

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # --------------------------------------------------------------------------- using it

    def cli(
        self, *args: str, check: bool = True, timeout: float = 120.0, input: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run `docker ARGS` against this engine; AssertionError with its output if it fails."""
        result = subprocess.run(
            [self.docker, *args],
            env={**os.environ, **self.env},
            capture_output=True,
            timeout=timeout,
            check=False,
            input=input,
        )
        done = subprocess.CompletedProcess(
            result.args,
            result.returncode,
            result.stdout.decode(errors="replace"),
            result.stderr.decode(errors="replace"),
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args)} exited with {done.returncode}: {done.stderr}{done.stdout}"
            )
        return done

    def import_image(self, rootfs: Path, tag: str, changes: Sequence[str] = ()) -> str:
        """`docker import` the directory tree `rootfs` as image `tag`; returns the image id.

        `changes` are Dockerfile instructions applied on import (`docker import -c`), e.g.
        `'ENTRYPOINT ["/bin/busybox"]'` or `'CMD ["/sbin/init"]'`.
        """
        archive = self.base / f"import-{os.getpid()}-{time.monotonic_ns()}.tar"
        try:
            with tarfile.open(archive, "w") as tar:
                for entry in sorted(rootfs.iterdir()):
                    tar.add(entry, arcname=entry.name)
            args = ["import"]
            for change in changes:
                args += ["-c", change]
            image_id = self.cli(*args, str(archive), tag).stdout.strip()
        finally:
            archive.unlink(missing_ok=True)
        return image_id

    def containers(self) -> list[dict[str, Any]]:
        """Every container of the engine, running or not (`docker ps -a`), one dict each."""
        out = self.cli("ps", "-a", "--no-trunc", "--format", "{{json .}}").stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def container_names(self) -> list[str]:
        return sorted(c["Names"] for c in self.containers())

    def remove_containers(self, names: Iterable[str] | None = None) -> None:
        """`docker rm -f` the named containers (all of them by default), whatever state."""
        targets = list(names) if names is not None else [c["ID"] for c in self.containers()]
        if targets:
            self.cli("rm", "-f", *targets, check=False)

    # ----------------------------------------------------------------------------- stop

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Remove every container, stop dockerd, clean up its mounts and directory."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                if self._ping():
                    self.remove_containers()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._kill_leftovers()
        self._unmount_all()
        shutil.rmtree(self.base, ignore_errors=True)

    def _kill_leftovers(self) -> None:
        """containerd and shims that outlived a killed dockerd (their argv names the dir)."""
        marker = str(self.base)
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if any(marker in part for part in proc.info["cmdline"] or ()):
                    found.append(proc)
        for proc in found:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(found, timeout=5.0)

    def _unmount_all(self) -> None:
        """dockerd leaves `exec/netns/default` (and, when killed, its data-root bind) mounted."""
        prefix = str(self.base) + "/"
        with open("/proc/self/mounts") as mounts:
            points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)

    def __enter__(self) -> DockerEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
