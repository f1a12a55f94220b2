"""What `hostile_clients`'s rows share: a row of figures, the settings, two swapd run at once
from one config (`quiet` and `hostile`), the clients (`load_clients.py`, each a process of its
own), and the ordinary client's requests per second while a hostile client works
(`ordinary_during`)."""

from __future__ import annotations

import contextlib
import functools
import statistics
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.ports import free_port_range

from .side_by_side import FAKE_MODEL
from .swapd_run import RunningSwapd

CLIENTS = Path(__file__).resolve().parent / "load_clients.py"
SIDES = ("quiet", "hostile")
MiB = 2**20


@dataclass
class Row:
    figure: str
    quiet: str
    hostile: str
    target: str = ""  # its target's key in benchmarks/targets.py; "": a figure with none
    value: float = 0.0  # what the target judges


@dataclass
class Settings:
    names: int
    rate: float
    rounds: int
    seconds: float
    connections: int
    scrapes: int
    output_mb: int = 50
    stalled: int = 10
    subscribers: int = 1000
    idle_seconds: float = 5.0
    body_timeout: float = 5.0


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# ------------------------------------------------------------------------------------------------
# the two swapd


def bench_model(name: str = "bench", port: str = "${PORT}") -> str:
    """A model entry running tests/support/upstreams/fake_model.py (an OpenAI-compatible server)."""
    return f"""
  {name}:
    cmd: {sys.executable} {FAKE_MODEL} --port {port} --name {name}
    proxy: http://127.0.0.1:{port}
    concurrencyLimit: 100000
"""


def config(extra_models: str = "", top: str = "") -> str:
    """`bench` (the ordinary client's model), more models, more top-level keys."""
    return f"""
healthCheckTimeout: 15
startPort: {free_port_range(16)}
{top}
models:
{bench_model()}{extra_models}
"""


@contextlib.contextmanager
def two_swapd(make: Callable[[], str] = config) -> Iterator[dict[str, RunningSwapd]]:
    """The two sides, each from a config `make` writes for it (ports of its own)."""
    with contextlib.ExitStack() as stack:
        sides = {side: stack.enter_context(RunningSwapd(make())) for side in SIDES}
        for swapd in sides.values():
            ordinary(swapd, 0.2, 1)  # `bench` loaded
        yield sides


def get(swapd: RunningSwapd, path: str, timeout: float = 120.0) -> bytes:
    with urllib.request.urlopen(swapd.url + path, timeout=timeout) as resp:
        return bytes(resp.read())


# ------------------------------------------------------------------------------------------------
# clients


def clients(*args: object) -> str:
    argv = [sys.executable, str(CLIENTS), *(str(a) for a in args)]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def ordinary(swapd: RunningSwapd, seconds: float, connections: int) -> float:
    return float(clients("ordinary", swapd.url, seconds, connections))


@contextlib.contextmanager
def in_background(work: Callable[[], object]) -> Iterator[None]:
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()


Work = Callable[[threading.Event], object]


def ordinary_during(swapd: RunningSwapd, settings: Settings, *work: Work) -> float:
    """The ordinary client's req/s while each of `work` runs in a thread of its own (a hostile
    client, a scraper), each told by its event that the measurement is over. Every row measures
    its ordinary client this way, on both sides."""
    stop = threading.Event()
    with contextlib.ExitStack() as running:
        for one in work:
            running.enter_context(in_background(functools.partial(one, stop)))
        try:
            return ordinary(swapd, settings.seconds, settings.connections)
        finally:
            stop.set()
