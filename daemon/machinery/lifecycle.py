"""Process machinery: start and stop one model's circus watcher. The only code with side effects
on model processes (the scheduler decides, this module does).

Start (its checks and the watcher's options are `model_start.py`'s): pre-check the executable
(circus answers `ok` even when the exec fails) and the port, `add` + `start` the watcher
`model-<safe id>` (the real id, port and definition hash travel in its env), check that circus
really started a pid, then wait for the health check while watching the pid through a pidfd.

Sleep and wake (`sleeping.py`): the server's own calls, the check that its GPU memory came back,
and the health check after a wake; the process stays under circus throughout.

Stop (the steps are `model_stop.py`'s): `cmdStop` (with `${PID}` filled) when set, else SIGTERM to
the process group; SIGKILL after `unloadTimeout`; then `rm` the watcher. The signals are sent
there and the exit is seen through the pidfd, so no circus command holds circus's arbiter-wide lock
while a model takes its time to stop (circus's own `stop` holds it for the whole grace period and
stalls every other start). A swap's
stop leaves the `rm` until the next start has spawned its process (`defer_remove`): the dead
watcher's removal then runs during that start's health check instead of before its `add`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import aiohttp

from ...ipc.model_status import Lingering, LingeringProcess
from ...ipc.routing_table import SleepSetting
from ...ipc.swap_record import SwapPhase
from ..config import Config, ModelConfig
from ..errors import ExitedDuringStart, HealthCheckTimeout, StartFailed
from . import (
    cuda_sleep,
    health,
    model_log,
    model_start,
    model_stop,
    pid_watch,
    ports,
    process_tree,
    sleep_proof,
    sleeping,
)
from .circus_client import CircusClient
from .cuda_sleep import CudaSleeper
from .gpu_backend import GpuBackend
from .model_process import (
    Running,
    definition_hash,
    fill_gpus,
    health_url,
    model_env,
)
from .watchers import Watchers

__all__ = ["GPU_RELEASE_TIMEOUT", "Lifecycle", "Running", "StartFailed"]

log = logging.getLogger("swapd.lifecycle")


def _no_phase(model_id: str, phase: SwapPhase, seconds: float) -> None:
    pass


# Where the host's MemAvailable is read for `sleep: cuda` (a test points it at a file of its own).
MEMINFO_ENV = "SWAPD_MEMINFO"
# A stopped model's GPU memory must be back within this, else what lingers is reported.
GPU_RELEASE_TIMEOUT = 10.0


class Lifecycle:
    def __init__(
        self,
        circus: CircusClient,
        log_dir: Path,
        *,
        gpu_backend: GpuBackend | None = None,
        gpu_release_timeout: float = GPU_RELEASE_TIMEOUT,
        asleep_dir: Path | None = None,
        port_release_timeout: float = ports.RELEASE_TIMEOUT,
        lingering_start_wait: float = ports.START_WAIT,
        shutdown_grace: float = 0.0,
        session: aiohttp.ClientSession | None = None,
        environ: Mapping[str, str] | None = None,
        echo_output: bool = False,
        on_phase: Callable[[str, SwapPhase, float], None] | None = None,
    ) -> None:
        self.watchers = Watchers(circus)
        self.log_dir = log_dir
        self.gpu_backend = gpu_backend
        self.gpu_release_timeout = gpu_release_timeout
        self.port_release_timeout = port_release_timeout
        self.lingering_start_wait = lingering_start_wait
        self.shutdown_grace = shutdown_grace
        # Set while the daemon stops alone (circusd restarts it): a start cancelled as its loop
        # closes leaves its process to the next daemon, which adopts it.
        self.detached = False
        # By model id: a port still listened on after the model stopped (until it is free).
        self.lingering: dict[str, Lingering] = {}
        # By model id: the processes started (or adopted) and not stopped yet.
        self.processes: dict[str, Running] = {}
        # By model id: what held GPU memory after its last stop (until its next start).
        self.gpu_lingering: dict[str, tuple[LingeringProcess, ...]] = {}
        self._session = session
        self._environ = dict(os.environ if environ is None else environ)
        # Told how long each phase took: (model id, START, HEALTH or VERIFY, seconds).
        self.on_phase = on_phase if on_phase is not None else _no_phase
        # Sleeps and wakes, and what each model holds asleep (its residual) and how long they took.
        self.sleeper = sleeping.Sleeper(
            gpu_backend,
            gpu_release_timeout,
            asleep_dir,
            on_phase=self.on_phase,
            cuda=CudaSleeper(
                self._environ, meminfo=Path(self._environ.get(MEMINFO_ENV) or cuda_sleep.MEMINFO)
            ),
        )
        # `logToStdout` of the config in force: a model's output also to circusd's stdout?
        self.echo_output = echo_output

    def reconfigure(self, config: Config) -> None:
        """A reload: the next starts follow the new config's `logToStdout`."""
        self.echo_output = config.models_to_stdout

    @property
    def closing(self) -> bool:
        """Set while circusd shuts everything down: no `rm` (it drops every watcher itself)."""
        return self.watchers.closing

    @closing.setter
    def closing(self, value: bool) -> None:
        self.watchers.closing = value

    @property
    def sleep_facts(self) -> Mapping[str, sleeping.SleepFacts]:
        return self.sleeper.facts

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True)
            )
        return self._session

    async def close(self) -> None:
        await self.watchers.close()
        if self._session is not None:
            await self._session.close()

    async def remove_watcher(self, model_id: str) -> None:
        await self.watchers.remove(model_id)

    def note_reaped(self, pid: int, exit_code: int) -> None:
        self.watchers.note_reaped(pid, exit_code)

    async def exit_code(self, pid: int, timeout: float = 1.5) -> int | None:
        return await self.watchers.exit_code(pid, timeout)

    # ----------------------------------------------------------------------------------- start

    def recheck_lingering(self) -> list[str]:
        """Forget the lingering ports that are free again; returns those models' ids."""
        freed = [mid for mid, item in self.lingering.items() if not ports.listening(item.port)]
        for mid in freed:
            del self.lingering[mid]
            log.info("%s: its port is free again", mid)
        return freed

    async def start(self, model: ModelConfig) -> Running:
        env = model_env(model, self._environ)
        model_start.check_executable(model, env)
        self.gpu_lingering.pop(model.id, None)
        await model_start.check_port(model, self.lingering, self.lingering_start_wait)
        log_path, offset = model_start.open_log(self.log_dir, model)
        began = time.monotonic()
        spawn = asyncio.ensure_future(self._spawn(model, env, log_path, offset))
        try:
            running = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            # circus may be starting the process right now: let it finish and stop that process,
            # rather than leave one nobody tracks.
            with contextlib.suppress(Exception):
                started = await spawn
                if not self.detached:
                    await self.stop(started, model, timeout=min(5.0, model.unload_timeout))
            raise
        spawned = time.monotonic()
        self.on_phase(model.id, SwapPhase.START, spawned - began)
        pid = running.pid
        exited = asyncio.ensure_future(pid_watch.wait_exit(pid))
        try:
            await health.wait_healthy(
                self.session,
                health_url(model),
                timeout=model.health_check_timeout,
                exited=exited,
            )
        except health.ProcessExited:
            self.processes.pop(model.id, None)
            code = await self.exit_code(pid)
            await self.remove_watcher(model.id)
            tail = await model_log.settled_tail(log_path, offset)
            raise ExitedDuringStart(
                model_log.start_failure(model.id, code, tail), log_tail=tail
            ) from None
        except health.HealthTimeout:
            await self.stop(running, model, timeout=min(5.0, model.unload_timeout))
            raise HealthCheckTimeout(
                f"model {model.id} health check timed out after "
                f"{model.health_check_timeout:g}s ({health_url(model)} never answered 200)",
                log_tail=await model_log.settled_tail(log_path, offset),
            ) from None
        except BaseException:
            # Cancelled (unload, reload, shutdown) or an unexpected error: leave no process behind.
            exited.cancel()
            if not self.detached:
                await asyncio.shield(
                    self.stop(running, model, timeout=min(5.0, model.unload_timeout))
                )
            raise
        exited.cancel()
        self.on_phase(model.id, SwapPhase.HEALTH, time.monotonic() - spawned)
        log.info("%s ready (pid %d, %s)", model.id, pid, model.proxy)
        return running

    async def _spawn(
        self, model: ModelConfig, env: dict[str, str], log_path: Path, offset: int
    ) -> Running:
        """`add` + `start` the watcher; the pid circus really started."""
        options = model_start.watcher_options(
            model, env, log_path, echo=self.echo_output, shutdown_grace=self.shutdown_grace
        )
        started = await self.watchers.spawn(model.id, fill_gpus(model.cmd, model), options)
        if not started:
            await self.remove_watcher(model.id)
            raise StartFailed(
                f"model {model.id} failed to start: circus could not spawn "
                f"{shlex.join(model.cmd)!r} (see circusd's log)",
                log_tail=model_log.read_tail(log_path, offset),
            )
        running = self.processes[model.id] = Running(
            model=model.id,
            pid=started[0],
            upstream=model.proxy,
            port=model.port,
            gpus=tuple(model.gpus or ()),
            started_at=time.time(),
            definition=definition_hash(model),
        )
        return running

    def track(self, running: Running) -> None:
        """A process found running (adopted after a daemon restart)."""
        self.processes[running.model] = running

    # ----------------------------------------------------------------------------- sleep, wake

    async def sleep(
        self, running: Running, model: ModelConfig | None, setting: SleepSetting
    ) -> float:
        """Tell the server to give its GPU memory back, and prove it did; the seconds it took.
        Raises `SleepFailed`; the process is left running either way."""
        where = await asyncio.to_thread(sleep_proof.whose, running, model, self._other_pids)
        return await self.sleeper.sleep(
            self.session,
            running.model,
            running.pid,
            running.upstream,
            setting,
            where,
            model.wake_probe if model is not None else None,
        )

    async def wake(
        self, running: Running, model: ModelConfig | None, setting: SleepSetting
    ) -> float:
        """Tell the server to take its memory back, then wait for its health check; the seconds
        it took. Raises `WakeFailed`."""
        where = await asyncio.to_thread(sleep_proof.whose, running, model, self._other_pids)
        exited = asyncio.ensure_future(pid_watch.wait_exit(running.pid))
        try:
            return await self.sleeper.wake(
                self.session,
                running.model,
                running.upstream,
                setting,
                health_url(model) if model is not None else None,
                model.health_check_timeout if model is not None else 120.0,
                exited,
                model.wake_probe if model is not None else None,
                where,
            )
        finally:
            exited.cancel()

    # ------------------------------------------------------------------------------------ stop

    async def stop(
        self,
        running: Running,
        model: ModelConfig | None,
        *,
        timeout: float | None = None,
        remove: bool = True,
        defer_remove: bool = False,
    ) -> tuple[LingeringProcess, ...]:
        """Stop the process (cmdStop, else SIGTERM), SIGKILL after `timeout`, rm the watcher, and
        wait for its GPU memory to come back. Returns what still holds GPU memory.

        `remove=False` while circusd itself shuts down: it holds its lock until every watcher
        stopped, and drops them all anyway. `defer_remove` (a swap: a start comes next) leaves the
        `rm` until that start has spawned its process."""
        grace = float(timeout if timeout is not None else (model.unload_timeout if model else 10))
        pid = running.pid
        if self.processes.get(running.model) is running:
            del self.processes[running.model]
        self.sleeper.forget(running.model)
        tree = await model_stop.end_process(
            running, model, grace, log_dir=self.log_dir, environ=self._environ
        )
        if remove and not self.closing:
            if defer_remove:
                self.watchers.defer(running.model)
            else:
                await self.remove_watcher(running.model)
        model_stop.kill_leftovers(pid, tree)
        # A docker model's processes are not our descendants: on its own GPUs, any process counts.
        foreign = model is not None and bool(model.cmd_stop) and bool(running.gpus)
        pids = None if foreign else {pid, *(p.pid for p in tree)}
        lingering, _ = await asyncio.gather(
            self._wait_gpu_release(running, pids), self._check_port_released(running)
        )
        running.lingering = lingering
        if lingering:
            self.gpu_lingering[running.model] = lingering
        else:
            self.gpu_lingering.pop(running.model, None)
        return lingering

    async def _wait_gpu_release(
        self, running: Running, pids: set[int] | None
    ) -> tuple[LingeringProcess, ...]:
        if self.gpu_backend is None:
            return ()
        # Models sharing its GPUs (placement by memory) keep running: their processes are not its.
        others = await asyncio.to_thread(self._other_pids, running.model) if pids is None else set()
        return await model_stop.wait_gpu_release(
            self.gpu_backend, running, pids, self.gpu_release_timeout, ignore_pids=others
        )

    def _other_pids(self, model_id: str) -> set[int]:
        return {
            p.pid
            for mid, r in self.processes.items()
            if mid != model_id
            for p in process_tree.process_tree(r.pid)
        }

    async def _check_port_released(self, running: Running) -> None:
        port = ports.model_port(running.port, running.upstream)
        if port is None:
            return
        if any(ports.model_port(r.port, r.upstream) == port for r in self.processes.values()):
            return  # another model's process serves on the same port
        if await ports.wait_free(port, self.port_release_timeout):
            self.lingering.pop(running.model, None)
            return
        lingering = await ports.report(running.model, port)
        log.warning("%s", lingering.message)
        self.lingering[running.model] = lingering
