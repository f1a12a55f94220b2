"""Running the `swapd` command as a user does, and the example configs of tests/data/configs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import CONFIGS  # noqa: F401 (the example configs, for the CLI tests)


def swapd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # The console script of this venv; `python -m swapd.daemon.cli` is the same entry point.
    exe = shutil.which("swapd", path=str(Path(sys.executable).parent))
    command = [exe] if exe else [sys.executable, "-m", "swapd.daemon.cli"]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )
