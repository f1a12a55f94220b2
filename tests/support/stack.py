"""The real swapd, run the way an operator runs it, for process tests.

`Stack` writes a config, runs `swapd run -c CONFIG --listen 127.0.0.1:PORT --run-dir DIR` as a
subprocess (which becomes circusd, with the real daemon and proxy watchers and real model
processes), waits until the proxy answers /health and the daemon answers `status`, and stops it
with SIGTERM, expecting exit code 0. Every process the stack started (found by a token in its
environment, which circus passes on to the daemon, the proxy and every model) is killed at the end
even when a test fails, so no test leaves a process behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil
import yaml
import zmq

from swapd.ipc import codec
from swapd.ipc.endpoints import Endpoints
from swapd.ipc.messages import Status, StatusReply
from swapd.ipc.status_doc import status_json
from tests.support.paths import REPO, UPSTREAMS

# Re-exported: tests have long taken their ports from here; the picker is tests/support/ports.py.
from tests.support.ports import free_port as free_port
from tests.support.ports import free_port_range as free_port_range
from tests.support.ports import free_ports as free_ports

FAKE_MODEL = UPSTREAMS / "fake_model.py"
PYTHON = sys.executable
STACK_TOKEN_ENV = "SWAPD_TEST_STACK"
GPU_BACKEND_ENV = "SWAPD_GPU_BACKEND"
FAKE_GPU_SCOPE_ENV = "SWAPD_FAKE_GPU_SCOPE"

T = TypeVar("T")


def docker_like_force_stop(name: str, state: str) -> None:
    """Test cleanup: stop a docker-like "container" whatever the test left behind (`docker stop -t
    0`; docker_like.py stands for `docker run --gpus`, which no real engine here can do)."""
    subprocess.run(
        [PYTHON, str(UPSTREAMS / "docker_like.py"), "stop", "-t", "0", name],
        env={**os.environ, "DOCKER_LIKE_STATE": state},
        capture_output=True,
        check=False,
    )


def fake_model_cmd(name: str, *extra: str, port: str = "${PORT}") -> str:
    """A config `cmd` that runs tests/support/upstreams/fake_model.py (stands for llama-server)."""
    parts = [PYTHON, str(FAKE_MODEL), "--port", port, "--name", name, *extra]
    return " ".join(parts)


def wait_for(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05, what: str = ""
) -> T:
    """Poll `predicate` until it returns something truthy; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
        except Exception as exc:  # a poll that fails is a poll that is not done yet
            last = exc
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what or predicate} (last: {last!r})"
            )
        time.sleep(interval)


def http_get(
    url: str, timeout: float = 5.0, context: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class Stack:
    """One running swapd. Use as a context manager, or through the `stack_factory` fixture."""

    def __init__(
        self,
        config: str | dict[str, Any],
        *,
        workdir: Path | None = None,
        proxy_processes: int = 1,
        env: dict[str, str] | None = None,
        port: int | None = None,
        run_args: tuple[str, ...] = (),
        tls: tuple[Path, Path] | None = None,
        llama_swap_flags: bool = False,
    ) -> None:
        # ipc:// paths must stay short (sun_path is 108 bytes), so not under pytest's tmp_path.
        self.base = Path(tempfile.mkdtemp(prefix="swapd-t-", dir="/tmp"))
        self.workdir = workdir or self.base
        self.run_dir = self.base / "run"
        self.log_dir = self.run_dir / "logs"
        self.config_path = self.workdir / "config.yaml"
        self.write_config(config)
        self.port = port or free_port()
        # `tls`: (certificate, key) the proxy serves HTTPS with; `ssl_context` trusts it.
        self.tls = tls
        self.ssl_context: ssl.SSLContext | None = None
        if tls is not None:
            self.ssl_context = ssl.create_default_context(cafile=str(tls[0]))
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        # Started as llama-swap is (`-config FILE -listen ADDR`, no sub-command).
        self.llama_swap_flags = llama_swap_flags
        self.output_path = self.base / "swapd-run.log"
        self.proxy_processes = proxy_processes
        self.run_args = run_args  # more `swapd run` options
        self.token = uuid.uuid4().hex
        self.env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET",)}
        self.env.update(env or {})
        self.env[STACK_TOKEN_ENV] = self.token
        # The fake GPU backend lists every process of the host that names its GPUs: scoped to this
        # stack's token, parallel stacks do not see each other's models on their GPUs.
        if self.env.get(GPU_BACKEND_ENV) == "fake" and FAKE_GPU_SCOPE_ENV not in (env or {}):
            self.env[FAKE_GPU_SCOPE_ENV] = self.token
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        # Learned GPU footprints (systemd's StateDirectory=) stay with this stack, unless a test
        # hands two stacks one directory (a restart).
        self.env.setdefault("STATE_DIRECTORY", str(self.base / "state"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None

    # ---------------------------------------------------------------------------- config

    def write_config(self, config: str | dict[str, Any]) -> None:
        text = config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False)
        self.config_path.write_text(text)

    # ----------------------------------------------------------------------------- start

    def start(self, timeout: float = 30.0) -> Stack:
        argv = [
            PYTHON, "-m", "swapd.daemon.cli", "run",
            "-c", str(self.config_path),
            "--listen", f"127.0.0.1:{self.port}",
            "--run-dir", str(self.run_dir),
            "--proxy-processes", str(self.proxy_processes),
            *self.run_args,
        ]  # fmt: skip
        if self.llama_swap_flags:
            listen = ["-listen", f"127.0.0.1:{self.port}"]
            argv[3:8] = ["-config", str(self.config_path), *listen]
        if self.tls is not None:
            argv += ["--tls-cert-file", str(self.tls[0]), "--tls-key-file", str(self.tls[1])]
        with self.output_path.open("ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=str(REPO),
                start_new_session=True,
            )
        try:
            wait_for(self._up, timeout, 0.05, "swapd to answer (proxy /health, daemon status)")
        except AssertionError:
            self.stop(check=False)
            raise AssertionError(f"swapd did not come up; its output:\n{self.output()}") from None
        return self

    def _up(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"swapd run exited with {self.proc.returncode}:\n{self.output()}")
        status, _ = http_get(self.url + "/health", timeout=2.0, context=self.ssl_context)
        if status != 200:
            return False
        return bool(self.status())

    # ------------------------------------------------------------------------- helpers

    def output(self) -> str:
        try:
            return self.output_path.read_text(errors="replace")
        except OSError:
            return ""

    def model_log(self, model_id: str) -> str:
        from swapd.ipc.watcher_names import model_log_name

        path = self.log_dir / model_log_name(model_id)
        return path.read_text(errors="replace") if path.exists() else ""

    def swapd(
        self, *args: str, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run `swapd ARGS --run-dir RUN_DIR` (status, unload, reload)."""
        result = subprocess.run(
            [PYTHON, "-m", "swapd.daemon.cli", *args, "--run-dir", str(self.run_dir)],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"swapd {' '.join(args)} failed ({result.returncode}): "
                f"{result.stderr}{result.stdout}"
            )
        return result

    def get_json(self, path: str, timeout: float = 10.0) -> tuple[int, Any]:
        """(status, JSON body) of a GET of `path` on the proxy, error statuses included."""
        status, body = http_get(self.url + path, timeout, self.ssl_context)
        return status, json.loads(body)

    def get_ok(self, path: str, timeout: float = 30.0) -> Any:
        """The JSON body of a GET of `path` on the proxy, which must answer 200."""
        status, body = http_get(self.url + path, timeout, self.ssl_context)
        assert status == 200, (path, status, body[:1000])
        return json.loads(body)

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        """What `swapd status --json` prints, parsed: the CLI's request (`Status`, on the daemon's
        ROUTER) and its document (`ipc.status_doc.status_json`), asked from this process. A
        `swapd status` process costs a quarter of a second of CPU, and tests poll status often;
        the CLI itself is run where a test is about it (`stack.swapd("status")`)."""
        if not (self.run_dir / "daemon.sock").exists():
            raise AssertionError(f"no daemon.sock in {self.run_dir}")
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(Endpoints(self.run_dir).daemon)
            sock.send(codec.encode(Status(id=1)))
            if not sock.poll(timeout * 1000):
                raise AssertionError(f"the daemon did not answer a status within {timeout:g}s")
            reply = codec.decode_reply(sock.recv_multipart()[-1])
        finally:
            sock.close()
        if not isinstance(reply, StatusReply):
            raise AssertionError(f"status: the daemon answered {reply!r}")
        # Through JSON text, as the CLI's output is: tuples become lists, keys strings.
        return json.loads(json.dumps(status_json(reply)))  # type: ignore[no-any-return]

    def model(self, model_id: str) -> dict[str, Any]:
        """One model's entry of `status()`."""
        for entry in self.status()["models"]:
            if entry["model"] == model_id:
                return entry
        raise KeyError(model_id)

    def wait_state(self, model_id: str, state: str, timeout: float = 15.0) -> dict[str, Any]:
        return wait_for(
            lambda: (m := self.model(model_id))["state"] == state and m,
            timeout,
            what=f"{model_id} to be {state}",
        )

    def circusctl(self, *args: str, check: bool = True) -> str:
        """Run `circusctl --endpoint <run dir's control socket> ARGS`; returns stdout."""
        circusctl = Path(PYTHON).parent / "circusctl"
        result = subprocess.run(
            [str(circusctl), "--endpoint", f"ipc://{self.run_dir}/circus-ctl.sock",
             "--timeout", "5", *args],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(f"circusctl {' '.join(args)}: {result.stderr}{result.stdout}")
        return result.stdout

    def watcher_pids(self, watcher: str) -> list[int]:
        """The pids circusd runs for a watcher (`swapd-daemon`, `swapd-proxy`, `model-...`)."""
        out = self.circusctl("list", watcher, check=False).strip()
        return [int(p) for p in out.replace(",", " ").split() if p.isdigit()]

    def kill_watcher(self, watcher: str, sig: int = signal.SIGKILL, timeout: float = 15) -> int:
        """Signal the one process of `watcher` (`swapd-daemon`, `swapd-proxy`) and wait until
        circusd has respawned it; returns the new pid."""
        (old,) = self.watcher_pids(watcher)
        os.kill(old, sig)
        new: list[int] = wait_for(
            lambda: [p for p in self.watcher_pids(watcher) if p != old],
            timeout=timeout,
            what=f"circusd to restart {watcher}",
        )
        return new[0]

    def processes(self) -> list[psutil.Process]:
        """Every live process started by this stack (it carries the stack's token)."""
        found = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.environ().get(STACK_TOKEN_ENV) == self.token:
                    if proc.status() != psutil.STATUS_ZOMBIE:
                        found.append(proc)
            except psutil.Error:
                continue
        return found

    # ------------------------------------------------------------------------------ stop

    def stop(self, timeout: float = 40.0, check: bool = True) -> int | None:
        """SIGTERM `swapd run` (circusd) and wait for it; then kill anything of ours left.

        With `check`, raise unless it exited 0 and left no process behind.
        """
        problems = []
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                problems.append(f"swapd run did not exit within {timeout}s of SIGTERM")
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.exit_code = self.proc.returncode
            if self.exit_code != 0:
                problems.append(f"swapd run exited with {self.exit_code}")
        leftovers = self.processes()
        if leftovers:
            # Processes die a little after circusd reaps them; give them a moment first.
            _, alive = psutil.wait_procs(leftovers, timeout=2.0)
            if alive:
                problems.append(
                    "left running: " + ", ".join(f"{p.pid} {' '.join(_cmdline(p))}" for p in alive)
                )
                for proc in alive:
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
                psutil.wait_procs(alive, timeout=5.0)
        if check and problems:
            raise AssertionError(
                "; ".join(problems) + f"\nswapd output ({self.base}):\n{self.output()[-6000:]}"
            )
        return self.exit_code

    def close(self) -> None:
        """`stop()`, then remove the stack's directory (run dir, config, logs): a stop that went
        badly raises first, and keeps it for a look (the failure names it)."""
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.stop(check=False)  # the block failed: its directory stays for a look


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return ["?"]
