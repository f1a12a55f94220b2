"""The checks and the circus options of one model's start, the steps `Lifecycle.start` runs
before its health check: the executable found (circus answers `ok` even when the exec fails), the
model's port free (what an earlier stop left on it waited for a while), its log opened, and the
watcher's options (its output streams, its signals).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...ipc.model_status import Lingering
from ..config import ModelConfig
from ..errors import PortStillInUse, StartFailed
from . import model_log, ports
from .model_stop import CMD_STOP_MARGIN

# The stream class circusd imports for a model's stdout and stderr (model_output.py), by its
# installed dotted name: not imported here, as importing circus calls logging.basicConfig(), which
# would leave the daemon's own logging set-up without effect.
OUTPUT_STREAM = "swapd.daemon.machinery.model_output.ModelOutputStream"


def check_executable(model: ModelConfig, env: Mapping[str, str]) -> None:
    if not model.cmd:
        raise StartFailed(f"model {model.id}: empty cmd")
    exe = model.cmd[0]
    found = shutil.which(exe, path=env.get("PATH", os.defpath))
    if found is None:
        what = "is not executable" if os.path.exists(exe) else "not found"
        raise StartFailed(f"model {model.id} failed to start: executable {exe!r} {what}")


async def check_port(
    model: ModelConfig, lingering_ports: dict[str, Lingering], lingering_start_wait: float
) -> None:
    # What an earlier stop left on the port: wait for it a while, then say so.
    lingering = lingering_ports.get(model.id)
    if lingering is not None:
        if not await ports.wait_free(lingering.port, lingering_start_wait):
            latest = await ports.report(model.id, lingering.port)
            lingering_ports[model.id] = latest
            message = ports.start_refused(model.id, latest, lingering_start_wait)
            raise PortStillInUse(message, port=lingering.port)
        del lingering_ports[model.id]
    # Another process on the model's port would answer its health check and take its traffic.
    if model.port is None:
        return
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", model.port))
        except OSError:
            raise StartFailed(
                f"model {model.id} cannot start: port {model.port} is already in use by "
                "another process"
            ) from None


def open_log(log_dir: Path, model: ModelConfig) -> tuple[Path, int]:
    """The model's log, rotated, with the start's line: its path and where this run's output
    begins."""
    log_path = model_log.log_path(log_dir, model.id)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    model_log.rotate_log(log_path)
    with log_path.open("a") as f:
        offset = f.tell()
        f.write(f"--- swapd {time.strftime('%Y-%m-%d %H:%M:%S')}: starting {model.id}: ")
        f.write(shlex.join(model.cmd) + "\n")
    return log_path, offset


def watcher_options(
    model: ModelConfig, env: dict[str, str], log_path: Path, *, echo: bool, shutdown_grace: float
) -> dict[str, Any]:
    """The options of the model's circus watcher."""
    # stdout and stderr are two circus streams on one file; circus's own rotation would have
    # each of them rotate it separately, so the daemon rotates between runs instead.
    stream = {
        "class": OUTPUT_STREAM,
        "filename": str(log_path),
        "model": model.id,
        "echo": echo,
    }
    return {
        "env": env,
        "copy_env": False,
        "respawn": False,
        "max_retry": 1,
        # The daemon stops models itself (its own signals, cmdStop). circus's stop reaches a
        # model only when circusd stops everything, and then the daemon lets the requests in
        # flight finish first (the shutdown grace): so circus's signal must not stop it, and
        # its SIGKILL comes only when the daemon failed to stop it in time.
        "graceful_timeout": shutdown_grace + float(model.unload_timeout) + CMD_STOP_MARGIN,
        "stop_signal": int(signal.SIGCONT),
        "stdout_stream": stream,
        "stderr_stream": dict(stream),
    }
