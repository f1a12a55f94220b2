"""A real `swapd run` for benchmarks: config written to a temp dir, started, stopped.

The benchmarks do not use tests/support/stack.py (a pytest helper); this is the same thing in a
few lines: `swapd run -c CONFIG --listen 127.0.0.1:PORT --run-dir TMP`, wait until the proxy's
/health answers, SIGTERM at the end.
Ports come from tests/support/ports.py, below the kernel's ephemeral range, as the tests' do.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

import psutil

from tests.support.ports import free_port

SWAPD = [sys.executable, "-m", "swapd.daemon.cli"]


def wait_http_ok(url: str, timeout: float, interval: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer 200 within {timeout}s")
        time.sleep(interval)


class RunningSwapd:
    def __init__(
        self,
        config_text: str,
        *,
        extra_args: tuple[str, ...] = (),
        start_timeout: float = 30,
        env: dict[str, str] | None = None,
    ) -> None:
        self.extra_args = extra_args
        self.env = env  # None: this process's environment (circusd passes it on)
        self._tmp = tempfile.TemporaryDirectory(prefix="swapd-bench-")
        root = Path(self._tmp.name)
        self.config = root / "config.yaml"
        self.config.write_text(config_text)
        self.run_dir = root / "run"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "swapd.log"
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> RunningSwapd:
        argv = [*SWAPD, "run", "-c", str(self.config), "--listen", f"127.0.0.1:{self.port}"]
        argv += ["--run-dir", str(self.run_dir), *self.extra_args]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        try:
            wait_http_ok(f"{self.url}/health", self.start_timeout, interval=0.05)
        except BaseException:
            self.stop()
            print(self.log.read_text()[-4000:], file=sys.stderr)
            raise
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid  # circusd: `swapd run` execs it

    def process(self, module: str) -> psutil.Process:
        """The process under circusd running `module` (`swapd.proxy`, `swapd.daemon.main`)."""
        for child in psutil.Process(self.pid).children(recursive=True):
            if module in " ".join(child.cmdline()):
                return child
        raise RuntimeError(f"no {module} process under {self.pid}")

    @property
    def proxy(self) -> psutil.Process:
        return self.process("swapd.proxy")

    @property
    def daemon(self) -> psutil.Process:
        return self.process("swapd.daemon.main")

    def stop(self) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        try:
            tree = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            tree = []
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        # circusd stops its watchers on SIGTERM; anything left (a SIGKILLed circusd) is ours to end.
        for child in tree:
            with contextlib.suppress(psutil.Error):
                child.kill()
        return proc.returncode

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        self._tmp.cleanup()
