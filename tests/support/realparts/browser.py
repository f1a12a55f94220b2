"""The browser part of the real tier (marker `browser`): Debian's `chromium`, driven by the PyPI
`playwright` package's Python API (a test extra). Playwright never downloads a browser here: it
launches `/usr/bin/chromium` (`executable_path`) with the flags this machine needs: no sandbox (the
tests run as root), no GPU, and no background networking (no connection ever leaves the host; the
machine's closed network would refuse them anyway).

Provisioned like the docker part (`provision.py`): under `SWAPD_REAL_PARTS=require` (CI) a missing
chromium is installed with `apt-get install chromium`; otherwise its tests are skipped with the
reason.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.realparts import provision

CHROMIUM = Path("/usr/bin/chromium")
DEBIAN_PACKAGES = ("chromium",)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def new_profile() -> Path:
    """A fresh, empty profile directory (Playwright passes it as `--user-data-dir`)."""
    return Path(tempfile.mkdtemp(prefix="swapd-chromium-", dir="/tmp"))


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the PyPI package playwright is not installed (pip install -e '.[test]')"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (Debian package chromium)"
    try:
        result = subprocess.run(
            [str(CHROMIUM), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{CHROMIUM} --version failed: {exc}"
    if result.returncode != 0:
        return f"{CHROMIUM} --version exited with {result.returncode}: {result.stderr[-500:]}"
    return None


def ensure_browser(how: str) -> Path:
    """Chromium's path (installing it in `require` mode), or PartMissing."""
    reason = _missing()
    if reason is not None and how == "require" and shutil.which("apt-get"):
        provision.install_debian_packages(DEBIAN_PACKAGES)
        reason = _missing()
    if reason is not None:
        raise provision.PartMissing(
            f"{reason}; {provision.HOW_TO_INSTALL}, or: apt-get install chromium"
        )
    return CHROMIUM
