"""How one model's process is stopped, the steps `Lifecycle.stop` runs in order: cmdStop (with
`${PID}` filled) or SIGTERM to the process group, SIGKILL after the grace; the children that
outlive it killed; then the wait for its GPU memory to come back.

The signals are sent here and the exit is seen through the pidfd, so no circus command holds
circus's arbiter-wide lock while a model takes its time to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import signal
from collections.abc import Mapping
from pathlib import Path

import psutil

from ...ipc.model_status import LingeringProcess
from ..config import ModelConfig
from ..errors import GpuError
from . import gpu, model_log, pid_watch, process_tree
from .gpu_backend import GpuBackend
from .model_process import Running, fill_gpus, fill_pid, model_env

log = logging.getLogger("swapd.lifecycle")

# How much longer than unloadTimeout a cmdStop (`docker stop -t N`) may run before it is killed.
CMD_STOP_MARGIN = 5.0


async def end_process(
    running: Running,
    model: ModelConfig | None,
    grace: float,
    *,
    log_dir: Path,
    environ: Mapping[str, str],
) -> list[psutil.Process]:
    """Stop the process (cmdStop, else SIGTERM), SIGKILL after `grace`; returns its process
    tree as it was before, for `kill_leftovers`."""
    pid = running.pid
    tree = process_tree.process_tree(pid)
    if pid_watch.is_alive(pid):
        if model is not None and model.cmd_stop:
            await run_cmd_stop(model, pid, grace, log_dir=log_dir, environ=environ)
        else:
            process_tree.signal_group(pid, signal.SIGTERM)
        if not await process_tree.wait_gone(pid, grace):
            log.warning("%s (pid %d) ignored SIGTERM for %gs: SIGKILL", running.model, pid, grace)
            process_tree.kill_tree(pid, tree)
            await process_tree.wait_gone(pid, 5.0)
    elif model is not None and model.cmd_stop and "${PID}" not in " ".join(model.cmd_stop):
        # The client is gone (circusd's own SIGTERM at shutdown, or it died), but what it
        # started may not be: a container outlives its `docker run`. cmdStop stops that. Not
        # when cmdStop names ${PID}: that pid is dead and may already be another process's.
        await run_cmd_stop(model, pid, grace, log_dir=log_dir, environ=environ)
    return tree


def kill_leftovers(pid: int, tree: list[psutil.Process]) -> None:
    """Children that outlive the main process (a shell's background job) get no second chance."""
    for proc in [p for p in tree if p.pid != pid and process_tree.alive(p)]:
        with contextlib.suppress(psutil.Error):
            proc.kill()


async def run_cmd_stop(
    model: ModelConfig, pid: int, grace: float, *, log_dir: Path, environ: Mapping[str, str]
) -> None:
    assert model.cmd_stop is not None
    argv = fill_pid(fill_gpus(model.cmd_stop, model), pid)
    log.info("%s: running cmdStop %s", model.id, shlex.join(argv))
    try:
        with model_log.log_path(log_dir, model.id).open("ab") as out:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=model_env(model, environ),
                start_new_session=True,
            )
    except OSError as exc:
        log.error("%s: cmdStop %s failed to run: %s; sending SIGTERM", model.id, argv[0], exc)
        process_tree.signal_group(pid, signal.SIGTERM)
        return
    try:
        code = await asyncio.wait_for(proc.wait(), grace + CMD_STOP_MARGIN)
    except TimeoutError:
        log.error("%s: cmdStop did not finish in %gs; killing it", model.id, grace)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return
    if code != 0:
        log.warning("%s: cmdStop exited with %d", model.id, code)


async def wait_gpu_release(
    backend: GpuBackend,
    running: Running,
    pids: set[int] | None,
    timeout: float,
    *,
    ignore_pids: set[int],
) -> tuple[LingeringProcess, ...]:
    """What still holds GPU memory once `timeout` passed (nothing: it came back in time)."""
    try:
        lingering = await gpu.wait_released(
            backend, pids, running.gpus or None, timeout, ignore_pids=ignore_pids
        )
    except GpuError as exc:
        log.error("%s: cannot check GPU release: %s", running.model, exc)
        return ()
    if lingering:
        log.warning(
            "%s stopped but GPU memory is still held: %s",
            running.model,
            ", ".join(f"pid {p.pid} on {p.gpu} ({p.used_bytes} bytes)" for p in lingering),
        )
    return tuple(lingering)
