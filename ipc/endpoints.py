"""Where the sockets live: `ipc://` files in one private run directory, never TCP."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

# In the run dir: written once this swapd's daemon ran `hooks.on_startup.preload`; `swapd run`
# removes it, so a daemon that circusd restarts under a running swapd does not preload again.
PRELOADED_FILE = "preloaded"


def default_run_dir() -> Path:
    """`/run/swapd` for root, `$XDG_RUNTIME_DIR/swapd` otherwise, else a per-user temp dir."""
    if os.geteuid() == 0:
        return Path("/run/swapd")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "swapd"
    return Path(tempfile.gettempdir()) / f"swapd-{os.geteuid()}"


def ensure_private_dir(path: Path) -> Path:
    """Create `path` with mode 0700 (and fix the mode of an existing one we own)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_uid == os.geteuid():
        path.chmod(0o700)
    return path


@dataclass(frozen=True)
class Endpoints:
    run_dir: Path

    def _ipc(self, name: str) -> str:
        return f"ipc://{self.run_dir / name}"

    @property
    def daemon(self) -> str:
        """The daemon's ROUTER (requests and casts)."""
        return self._ipc("daemon.sock")

    @property
    def events(self) -> str:
        """The daemon's PUB (routing table, states, drains)."""
        return self._ipc("events.sock")

    @property
    def circus_ctl(self) -> str:
        return self._ipc("circus-ctl.sock")

    @property
    def circus_pub(self) -> str:
        return self._ipc("circus-pub.sock")

    @property
    def circus_ini(self) -> Path:
        return self.run_dir / "circus.ini"

    @property
    def log_dir(self) -> Path:
        return self.run_dir / "logs"

    @property
    def asleep_dir(self) -> Path:
        """One file per asleep model (its watcher's name; the pid inside): a daemon that restarts
        adopts those processes asleep."""
        return self.run_dir / "asleep"
