"""Process machinery: start and stop one model's circus watcher. The only code with side effects
on model processes (the scheduler decides, this module does).

Start: pre-check the executable (circus answers `ok` even when the exec fails), `add` + `start`
the watcher `model-<safe id>` (the real id, port and definition hash travel in its env), check that
circus really started a pid, then wait for the health check while watching the pid through a pidfd.

Stop: `cmdStop` (with `${PID}` filled) when set, else SIGTERM to the process group; SIGKILL after
`unloadTimeout`; then `rm` the watcher. The signals are sent here and the exit is seen through the
pidfd, so no circus command holds circus's arbiter-wide lock while a model takes its time to stop
(circus's own `stop` holds it for the whole grace period and stalls every other start). A swap's
stop leaves the `rm` until the next start has spawned its process (`defer_remove`): the dead
watcher's removal then runs during that start's health check instead of before its `add`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shlex
import shutil
import signal
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import psutil

from ..ipc import watcher_names
from ..ipc.messages import LingeringProcess
from . import health, pid_watch
from .circus_client import CircusClient, CircusError
from .config import ModelConfig
from .scheduler import EnsureError

log = logging.getLogger("swapd.lifecycle")

LOG_TAIL_LINES = 20
LOG_MAX_BYTES = 10 * 1024 * 1024
LOG_BACKUPS = 2
# How much longer than unloadTimeout a cmdStop (`docker stop -t N`) may run before it is killed.
CMD_STOP_MARGIN = 5.0
# A stopped model's GPU memory must be back within this, else what lingers is reported.
GPU_RELEASE_TIMEOUT = 10.0
# A deferred watcher removal runs once the next start has spawned, or after this when none comes.
REMOVE_DEFER_MAX = 0.5
# Variables of swapd's own environment that must not reach model processes.
_PRIVATE_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "CIRCUSCTL_ENDPOINT")

ENV_MODEL_ID = "SWAPD_MODEL_ID"
ENV_PORT = "SWAPD_PORT"
ENV_HASH = "SWAPD_MODEL_HASH"


class StartFailed(EnsureError):
    """A start that did not reach `ready`: the scheduler answers the waiting requests with it."""


@dataclass
class Running:
    """A model process circus runs for us."""

    model: str
    pid: int
    upstream: str
    port: int | None
    gpus: tuple[str, ...]
    started_at: float  # wall clock
    definition: str  # definition_hash() of the config it was started with
    lingering: tuple[LingeringProcess, ...] = field(default=())


def definition_hash(model: ModelConfig) -> str:
    """What decides whether a running process still matches its config (reload, adoption)."""
    relevant = (
        model.cmd,
        model.cmd_stop,
        model.proxy,
        model.check_endpoint,
        sorted(model.env.items()),
        model.gpus,
        model.port,
    )
    return hashlib.sha256(msgspec.json.encode(relevant)).hexdigest()[:16]


def health_url(model: ModelConfig) -> str | None:
    if model.check_endpoint is None:
        return None
    path = (
        model.check_endpoint if model.check_endpoint.startswith("/") else "/" + model.check_endpoint
    )
    return model.proxy.rstrip("/") + path


def model_env(model: ModelConfig, base: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in _PRIVATE_ENV}
    env.update(model.env)
    if model.gpus and "CUDA_VISIBLE_DEVICES" not in model.env:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(model.gpus)
    env[ENV_MODEL_ID] = model.id
    env[ENV_HASH] = definition_hash(model)
    if model.port is not None:
        env[ENV_PORT] = str(model.port)
    return env


def read_tail(path: Path, offset: int = 0, lines: int = LOG_TAIL_LINES) -> tuple[str, ...]:
    """The last `lines` lines written to `path` since byte `offset` (the start of this run)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = offset if offset <= size else 0
            f.seek(max(start, size - 64 * 1024))
            data = f.read()
    except OSError:
        return ()
    text = data.decode(errors="replace").splitlines()
    return tuple(text[-lines:])


def rotate_log(path: Path, keep: int = LOG_BACKUPS) -> None:
    """Before a start: a log over LOG_MAX_BYTES becomes `.1` (older ones shift, `keep` kept)."""
    try:
        if path.stat().st_size < LOG_MAX_BYTES:
            return
    except FileNotFoundError:
        return
    for index in range(keep - 1, 0, -1):
        older = path.with_name(f"{path.name}.{index}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{index + 1}"))
    path.replace(path.with_name(f"{path.name}.1"))


def fill_pid(argv: tuple[str, ...], pid: int) -> list[str]:
    return [arg.replace("${PID}", str(pid)) for arg in argv]


class Lifecycle:
    def __init__(
        self,
        circus: CircusClient,
        log_dir: Path,
        *,
        gpu_backend: Any = None,
        gpu_release_timeout: float = GPU_RELEASE_TIMEOUT,
        session: aiohttp.ClientSession | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.circus = circus
        self.log_dir = log_dir
        self.gpu_backend = gpu_backend
        self.gpu_release_timeout = gpu_release_timeout
        # Set while circusd shuts everything down: it drops every watcher itself and refuses
        # `rm` until it is done, so stops must not wait for it.
        self.closing = False
        # Set while the daemon stops alone (circusd restarts it): a start cancelled as its loop
        # closes leaves its process to the next daemon, which adopts it.
        self.detached = False
        self._session = session
        self._environ = dict(os.environ if environ is None else environ)
        # circus lifecycle commands go one at a time (its arbiter lock refuses overlapping ones).
        self._circus_lock = asyncio.Lock()
        # Watchers of stopped models whose `rm` waits for the next spawn (or REMOVE_DEFER_MAX),
        # and the `rm`s under way; both by model id. A start of the same id awaits its `rm` first.
        self._deferred: set[str] = set()
        self._removals: dict[str, asyncio.Task[None]] = {}
        self._defer_timer: asyncio.TimerHandle | None = None
        # Exit codes circus reported in `reap` events, for processes already reaped.
        self.reaped: dict[int, int] = {}
        self._reap_waiters: dict[int, asyncio.Future[int]] = {}

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True)
            )
        return self._session

    async def close(self) -> None:
        if self._defer_timer is not None:
            self._defer_timer.cancel()
        self._deferred.clear()
        removals = list(self._removals.values())
        if removals:
            _, pending = await asyncio.wait(removals, timeout=2.0)
            for task in pending:
                task.cancel()
        if self._session is not None:
            await self._session.close()

    def log_path(self, model_id: str) -> Path:
        return self.log_dir / f"{watcher_names.watcher_name(model_id)}.log"

    # ---------------------------------------------------------------------------------- circus

    async def _circus(self, command: str, **props: Any) -> dict[str, Any]:
        async with self._circus_lock:
            return await self.circus.call_locked(command, **props)

    async def remove_watcher(self, model_id: str) -> None:
        """`rm` the model's watcher (joining an `rm` of it already under way)."""
        if self.closing:
            return
        await asyncio.shield(self._removal(model_id))

    def defer_removal(self, model_id: str) -> None:
        """`rm` the watcher of a stopped model after the next spawn: a swap's start then does not
        queue its `add` and `start` behind it on circus's lock."""
        if self.closing:
            return
        self._deferred.add(model_id)
        if self._defer_timer is None:
            self._defer_timer = asyncio.get_running_loop().call_later(
                REMOVE_DEFER_MAX, self._remove_deferred
            )

    def _remove_deferred(self) -> None:
        if self._defer_timer is not None:
            self._defer_timer.cancel()
            self._defer_timer = None
        for model_id in list(self._deferred):
            self._removal(model_id)

    def _removal(self, model_id: str) -> asyncio.Task[None]:
        self._deferred.discard(model_id)
        task = self._removals.get(model_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._rm(model_id))
            self._removals[model_id] = task
            task.add_done_callback(lambda t: self._removal_done(model_id, t))
        return task

    def _removal_done(self, model_id: str, task: asyncio.Task[None]) -> None:
        if self._removals.get(model_id) is task:
            del self._removals[model_id]
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: removing its watcher failed: %r", model_id, task.exception())

    async def _rm(self, model_id: str) -> None:
        if self.closing:
            return
        with contextlib.suppress(CircusError):
            await self._circus("rm", name=watcher_names.watcher_name(model_id), waiting=True)

    # ----------------------------------------------------------------------------------- start

    def _check_executable(self, model: ModelConfig, env: Mapping[str, str]) -> None:
        if not model.cmd:
            raise StartFailed(502, "start_failed", f"model {model.id}: empty cmd")
        exe = model.cmd[0]
        found = shutil.which(exe, path=env.get("PATH", os.defpath))
        if found is None:
            what = "is not executable" if os.path.exists(exe) else "not found"
            raise StartFailed(
                502,
                "start_failed",
                f"model {model.id} failed to start: executable {exe!r} {what}",
            )

    @staticmethod
    def _check_port(model: ModelConfig) -> None:
        # Another process on the model's port would answer its health check and take its traffic.
        if model.port is None:
            return
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", model.port))
            except OSError:
                raise StartFailed(
                    502,
                    "start_failed",
                    f"model {model.id} cannot start: port {model.port} is already in use by "
                    "another process",
                ) from None

    async def start(self, model: ModelConfig) -> Running:
        env = model_env(model, self._environ)
        self._check_executable(model, env)
        self._check_port(model)
        log_path = self.log_path(model.id)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        rotate_log(log_path)
        with log_path.open("a") as f:
            offset = f.tell()
            f.write(f"--- swapd {time.strftime('%Y-%m-%d %H:%M:%S')}: starting {model.id}: ")
            f.write(shlex.join(model.cmd) + "\n")
        # stdout and stderr are two circus streams on one file; circus's own rotation would have
        # each of them rotate it separately, so the daemon rotates between runs instead.
        stream = {"class": "FileStream", "filename": str(log_path)}
        options = {
            "env": env,
            "copy_env": False,
            "respawn": False,
            "max_retry": 1,
            "graceful_timeout": float(model.unload_timeout),
            "stop_signal": int(signal.SIGTERM),
            "stdout_stream": stream,
            "stderr_stream": dict(stream),
        }
        # This model's own watcher may still be waiting for its `rm` (a quick swap back).
        if model.id in self._deferred or model.id in self._removals:
            await self.remove_watcher(model.id)
        spawn = asyncio.ensure_future(self._spawn(model, options, log_path, offset))
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
            code = await self.exit_code(pid)
            await self.remove_watcher(model.id)
            tail = await self._settled_tail(log_path, offset)
            said = f"exit code {code}" if code is not None else "an unknown exit code"
            raise StartFailed(
                502,
                "start_failed",
                f"model {model.id} exited during startup with {said}",
                tail,
            ) from None
        except health.HealthTimeout:
            await self.stop(running, model, timeout=min(5.0, model.unload_timeout))
            raise StartFailed(
                504,
                "health_check_timeout",
                f"model {model.id} health check timed out after "
                f"{model.health_check_timeout:g}s ({health_url(model)} never answered 200)",
                await self._settled_tail(log_path, offset),
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
        log.info("%s ready (pid %d, %s)", model.id, pid, model.proxy)
        return running

    async def _spawn(
        self, model: ModelConfig, options: dict[str, Any], log_path: Path, offset: int
    ) -> Running:
        """`add` + `start` the watcher; the pid circus really started."""
        name = watcher_names.watcher_name(model.id)
        add = {"name": name, "cmd": model.cmd[0], "args": list(model.cmd[1:]), "options": options}
        try:
            try:
                await self._circus("add", **add)
            except CircusError as exc:
                if "already exist" not in exc.reason:
                    raise
                # A watcher left behind by an earlier run (it died, or the daemon died mid-start).
                await self.remove_watcher(model.id)
                await self._circus("add", **add)
            reply = await self._circus("start", name=name, waiting=True)
        finally:
            # The process is spawned: the removals that waited for it run during its health check.
            self._remove_deferred()
        started = (reply.get("info") or {}).get("started") or []
        if not started:
            await self.remove_watcher(model.id)
            raise StartFailed(
                502,
                "start_failed",
                f"model {model.id} failed to start: circus could not spawn "
                f"{shlex.join(model.cmd)!r} (see circusd's log)",
                read_tail(log_path, offset),
            )
        return Running(
            model=model.id,
            pid=int(started[0]),
            upstream=model.proxy,
            port=model.port,
            gpus=tuple(model.gpus or ()),
            started_at=time.time(),
            definition=definition_hash(model),
        )

    def note_reaped(self, pid: int, exit_code: int) -> None:
        """circus's `reap` event: the exit code of a process circusd has reaped."""
        self.reaped[pid] = exit_code
        if len(self.reaped) > 1000:
            self.reaped.pop(next(iter(self.reaped)))
        waiter = self._reap_waiters.pop(pid, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(exit_code)

    async def exit_code(self, pid: int, timeout: float = 1.5) -> int | None:
        """The exit code of an exited process: from its zombie while circusd has not reaped it,
        else from circus's `reap` event (which comes within check_delay)."""
        code = pid_watch.zombie_exit_code(pid)
        if code is not None:
            return code
        if pid in self.reaped:
            return self.reaped[pid]
        waiter = self._reap_waiters.setdefault(pid, asyncio.get_running_loop().create_future())
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            return self.reaped.get(pid)
        finally:
            if self._reap_waiters.get(pid) is waiter and waiter.done():
                self._reap_waiters.pop(pid, None)

    async def _settled_tail(self, path: Path, offset: int) -> tuple[str, ...]:
        # circusd copies the process's output to the file from its own loop; let it catch up.
        last = -1
        for _ in range(20):
            size = _size(path)
            if size == last:
                break
            last = size
            await asyncio.sleep(0.05)
        return read_tail(path, offset)

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
        tree = self._process_tree(pid)
        if pid_watch.is_alive(pid):
            if model is not None and model.cmd_stop:
                await self._run_cmd_stop(model, pid, grace)
            else:
                self._signal_group(pid, signal.SIGTERM)
            if not await self._wait_gone(pid, grace):
                log.warning(
                    "%s (pid %d) ignored SIGTERM for %gs: SIGKILL", running.model, pid, grace
                )
                self._kill_tree(pid, tree)
                await self._wait_gone(pid, 5.0)
        elif model is not None and model.cmd_stop and "${PID}" not in " ".join(model.cmd_stop):
            # The client is gone (circusd's own SIGTERM at shutdown, or it died), but what it
            # started may not be: a container outlives its `docker run`. cmdStop stops that. Not
            # when cmdStop names ${PID}: that pid is dead and may already be another process's.
            await self._run_cmd_stop(model, pid, grace)
        if remove and not self.closing:
            if defer_remove:
                self.defer_removal(running.model)
            else:
                await self.remove_watcher(running.model)
        # Children that outlive the main process (a shell's background job) get no second chance.
        leftovers = [p for p in tree if p.pid != pid and _alive(p)]
        for proc in leftovers:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        # A docker model's processes are not our descendants: on its own GPUs, any process counts.
        foreign = model is not None and bool(model.cmd_stop) and bool(running.gpus)
        pids = None if foreign else {pid, *(p.pid for p in tree)}
        lingering = await self._wait_gpu_release(running, pids)
        running.lingering = lingering
        return lingering

    async def _run_cmd_stop(self, model: ModelConfig, pid: int, grace: float) -> None:
        assert model.cmd_stop is not None
        argv = fill_pid(model.cmd_stop, pid)
        log.info("%s: running cmdStop %s", model.id, shlex.join(argv))
        log_path = self.log_path(model.id)
        try:
            with log_path.open("ab") as out:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    env=model_env(model, self._environ),
                    start_new_session=True,
                )
        except OSError as exc:
            log.error("%s: cmdStop %s failed to run: %s; sending SIGTERM", model.id, argv[0], exc)
            self._signal_group(pid, signal.SIGTERM)
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

    @staticmethod
    def _signal_group(pid: int, signum: int) -> None:
        # circus starts every process in its own process group: signal the group (as llama-swap
        # does) so a shell wrapper's children hear it too.
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signum)
            else:
                os.kill(pid, signum)
        except ProcessLookupError:
            pass

    def _kill_tree(self, pid: int, tree: list[psutil.Process]) -> None:
        self._signal_group(pid, signal.SIGKILL)
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                proc.kill()

    @staticmethod
    def _process_tree(pid: int) -> list[psutil.Process]:
        try:
            root = psutil.Process(pid)
            descendants = _descendants(pid)
            if descendants is None:
                return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []
        tree = [root]
        for child in descendants:
            with contextlib.suppress(psutil.Error):
                tree.append(psutil.Process(child))
        return tree

    @staticmethod
    async def _wait_gone(pid: int, timeout: float) -> bool:
        if not pid_watch.is_alive(pid):
            return True
        if timeout <= 0:
            return False
        try:
            await asyncio.wait_for(pid_watch.wait_exit(pid), timeout)
        except TimeoutError:
            return not pid_watch.is_alive(pid)
        return True

    async def _wait_gpu_release(
        self, running: Running, pids: set[int] | None
    ) -> tuple[LingeringProcess, ...]:
        if self.gpu_backend is None:
            return ()
        from . import gpu

        try:
            lingering = await gpu.wait_released(
                self.gpu_backend, pids, running.gpus or None, self.gpu_release_timeout
            )
        except gpu.GpuError as exc:
            log.error("%s: cannot check GPU release: %s", running.model, exc)
            return ()
        if lingering:
            log.warning(
                "%s stopped but GPU memory is still held: %s",
                running.model,
                ", ".join(f"pid {p.pid} on {p.gpu} ({p.used_bytes} bytes)" for p in lingering),
            )
        return tuple(lingering)


_PROC_CHILDREN = os.path.exists("/proc/thread-self/children")


def _descendants(pid: int) -> list[int] | None:
    """Every descendant of `pid`, from the kernel's per-thread `children` lists: a few small
    reads where psutil's `children()` reads the stat of every process on the host (ms, on the
    swap path). None where the kernel has no such lists (CONFIG_PROC_CHILDREN off)."""
    if not _PROC_CHILDREN:
        return None
    found: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{current}/task/{tid}/children", "rb") as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                continue
            found.extend(children)
            todo.extend(children)
    return found


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
