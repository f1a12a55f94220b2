"""A Debian system with a real systemd as PID 1, in a container on the private docker engine.

`prepare` is the real part `systemd` of tests/support/realparts/plugin.py: Debian's `systemd`
package on the host (systemd-analyze) and `debootstrap`, installed when missing where CI=true.

The root filesystem comes from Debian's packages (`debootstrap --variant=minbase` with systemd,
dbus, python3, curl and procps), is cached as a tarball under $SWAPD_TEST_CACHE (default
~/.cache/swapd-tests) so that reruns skip the minute and a half debootstrap takes, and becomes an
image with `docker import` (`CMD /sbin/init`; import takes no STOPSIGNAL, so the container is
removed with `docker rm --force`, which kills its whole PID namespace and leaves no cgroup behind).
What cannot be made here raises provision.PartMissing: a skip, or a failure where CI=true.

`SystemdContainer` runs it the way systemd wants to run in a container without --privileged:
`--network host` (loopback only: the container's servers are on this machine's 127.0.0.1, never on
a bridge), the host's cgroup tree mounted read-write (systemd makes each unit a cgroup below the
container's own), tmpfs on /run and /run/lock, and `container=docker` so systemd knows where it
is. Commands run in it with `docker exec`.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO
from tests.support.realparts import provision
from tests.support.realparts.docker_engine import DockerEngine

SUITE = "bookworm"
# (Debian package, the program of it this tier runs on the host)
TOOLS = (("systemd", "systemd-analyze"), ("debootstrap", "debootstrap"))
PACKAGES = ("systemd", "systemd-sysv", "dbus", "python3", "python3-venv", "curl", "procps")
# Half of what debootstrap leaves is apt's caches, docs and translations; every container copies
# the whole image (vfs storage), so they stay out of the tarball.
TRIMMED = (
    "var/cache/apt",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/locale",
)
IMAGE_REPO = "swapd-systemd-test"
IMAGE_CHANGES = ('CMD ["/sbin/init"]',)
RUN_OPTIONS = (
    "--network=host",
    "--volume=/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs=/run",
    "--tmpfs=/run/lock",
    "--env=container=docker",
)


def rootfs_key() -> str:
    recipe = f"debootstrap --variant=minbase --include={','.join(PACKAGES)} {SUITE} - {TRIMMED}"
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class SystemdTools:
    """The host's side of the systemd tier: the real part `systemd`
    (tests/support/realparts/plugin.py), prepared before any test runs."""

    analyze: str  # systemd-analyze, for `verify` of the unit file
    # The cached root filesystem, or why none could be made here (the container tests say it).
    rootfs: Path | None
    rootfs_missing: str = ""
    # swapd and what it needs as wheels, for `pip install --no-index` in the container.
    wheels: Path | None = None

    def image_tarball(self) -> Path:
        if self.rootfs is None:
            raise provision.PartMissing(self.rootfs_missing)
        return self.rootfs


def prepare(how: str) -> SystemdTools:
    """Everything slow the systemd tier needs, before any test and outside every test's timeout
    (each step has its own bound, and a failure says which step): Debian's `systemd` (for
    systemd-analyze) and `debootstrap`, installed when missing in `require` mode (CI), as
    provision.py does for the other parts; the root filesystem, made once with debootstrap and
    cached; swapd's wheels, built from this checkout for this run."""
    missing = [pkg for pkg, exe in TOOLS if shutil.which(exe) is None]
    if missing and how == "require":
        provision.install_debian_packages(tuple(missing))
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        raise provision.PartMissing(
            f"systemd-analyze is not installed (Debian package systemd); {provision.HOW_TO_INSTALL}"
        )
    try:
        rootfs: Path | None = rootfs_tarball(shutil.which("debootstrap"))
        missing_rootfs = ""
    except provision.PartMissing as exc:
        rootfs, missing_rootfs = None, str(exc)
    wheels = None
    if rootfs is not None:
        wheels = Path(tempfile.mkdtemp(prefix="swapd-wheels-", dir="/tmp"))
        # Every process of the run (xdist's workers too) lives until the run ends.
        atexit.register(shutil.rmtree, wheels, ignore_errors=True)
        build_wheels(wheels, REPO)
    return SystemdTools(analyze, rootfs, missing_rootfs, wheels)


def rootfs_tarball(debootstrap: str | None) -> Path:
    """The cached root filesystem tarball, made with debootstrap the first time (about a minute).

    A lock file serializes parallel runs; the tarball appears by rename, so a run killed halfway
    leaves no half-made cache behind.
    """
    cache = provision.cache_dir()
    tarball = cache / f"systemd-rootfs-{SUITE}-{rootfs_key()}.tar"
    with (cache / "systemd-rootfs.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tarball.exists():
            return tarball
        if debootstrap is None:
            raise provision.PartMissing(
                f"debootstrap is not installed (Debian package debootstrap); "
                f"{provision.HOW_TO_INSTALL}"
            )
        with tempfile.TemporaryDirectory(dir=cache, prefix="rootfs-build-") as work:
            root = Path(work) / "root"
            provision._run(
                [
                    debootstrap,
                    "--variant=minbase",
                    f"--include={','.join(PACKAGES)}",
                    SUITE,
                    str(root),
                ],
                timeout=900,
                what="debootstrap",
            )
            partial = Path(work) / "rootfs.tar"
            excludes = [f"--exclude=./{path}/*" for path in TRIMMED]
            provision._run(
                ["tar", "--numeric-owner", *excludes, "-C", str(root), "-cf", str(partial), "."],
                timeout=300,
                what="tar of the root filesystem",
            )
            partial.replace(tarball)
    return tarball


def docker_argv(engine: DockerEngine) -> list[str]:
    """The docker CLI pointed at this engine."""
    return [engine.docker, "--host", engine.host]


def ensure_image(engine: DockerEngine, tools: SystemdTools) -> str:
    """The image on this docker engine (`docker import` of the cached tarball when missing)."""
    docker = docker_argv(engine)
    tag = f"{IMAGE_REPO}:{rootfs_key()}"
    probe = subprocess.run(
        [*docker, "image", "inspect", tag], capture_output=True, text=True, timeout=60
    )
    if probe.returncode == 0:
        return tag
    tarball = tools.image_tarball()
    changes = [arg for change in IMAGE_CHANGES for arg in ("--change", change)]
    provision._run(
        [*docker, "import", *changes, str(tarball), tag], timeout=300, what="docker import"
    )
    return tag


def build_wheels(dest: Path, source: Path) -> list[Path]:
    """swapd and everything it needs, as wheels, so the container installs with --no-index."""
    dest.mkdir(parents=True, exist_ok=True)
    provision._run(
        [sys.executable, "-m", "pip", "wheel", "-q", str(source), "-w", str(dest)],
        timeout=600,
        what="pip wheel",
    )
    return sorted(dest.glob("*.whl"))


class SystemdContainer:
    """One container whose PID 1 is systemd; `exec` runs a command in it."""

    def __init__(self, engine: DockerEngine, image: str) -> None:
        self.docker = docker_argv(engine)
        self.image = image
        self.name = f"swapd-systemd-{uuid.uuid4().hex[:8]}"
        self.started = False

    def start(self, timeout: float = 60.0) -> SystemdContainer:
        provision._run(
            [*self.docker, "run", "--detach", f"--name={self.name}", *RUN_OPTIONS, self.image],
            timeout=120,
            what="docker run of the systemd image",
        )
        self.started = True
        # `is-system-running --wait` returns once boot finished: "running", or "degraded" when
        # some unit failed (then the failed units say which).
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            done = self.exec("systemctl", "is-system-running", "--wait", check=False, timeout=60)
            state = done.stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.2)  # systemd's bus is not up yet: it answers "offline" or nothing
        if state != "running":
            failed = self.exec("systemctl", "--failed", "--no-pager", check=False).stdout
            raise provision.PartMissing(
                f"systemd in the container did not boot ({state!r}):\n{failed}"
            )
        return self

    def exec(
        self,
        *argv: str,
        check: bool = True,
        timeout: float = 60.0,
        input: str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        options = [f"--env={key}={value}" for key, value in (env or {}).items()]
        if input is not None:
            options.append("--interactive")
        done = subprocess.run(
            [*self.docker, "exec", *options, self.name, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited with {done.returncode} in {self.name}:\n"
                f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        return done

    def sh(self, script: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return self.exec("sh", "-c", script, **kwargs)  # type: ignore[arg-type]

    def write(self, path: str, text: str, mode: str = "0644") -> None:
        self.exec("install", "-D", "-m", mode, "/dev/stdin", path, input=text)

    def copy_in(self, source: Path, dest: str) -> None:
        argv = [*self.docker, "cp", str(source), f"{self.name}:{dest}"]
        provision._run(argv, timeout=120, what="docker cp")

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        """`systemctl show` properties of a unit, as a dict."""
        args = [f"--property={name}" for name in properties]
        out = self.exec("systemctl", "show", *args, unit).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def remove(self) -> None:
        if self.started:
            with contextlib.suppress(provision.PartMissing):
                provision._run(
                    [*self.docker, "rm", "--force", self.name], timeout=60, what="docker rm"
                )
            self.started = False
