"""`hostile_clients`'s rows for issue 29's readers, subscribers and stalled uploads; each side
by side in one run (`quiet`: no hostile client, `hostile`: one), rounds in rotating order, and
each with the ordinary client's req/s measured during it on both sides (`ordinary_during`).

- `readers`: the proxy's resident memory while a model (`talker`, beside `bench`) writes
  `--output-mb` MB as one line, with `--stalled` `/api/events` subscribers that read nothing
  (hostile) or none (quiet): its idle RSS before, its peak (VmHWM, reset first) during.
- `subscribers`: the proxy's CPU, idle (no request) for `--idle-seconds`, with `--subscribers`
  `/api/events` clients connected and reading (hostile) or none (quiet); 7 models configured.
- `upload`: how long a swap (`x` to `y`) takes while a request to `x` holds a stalled upload (10
  bytes of a 100,000-byte body; hostile) or nothing (quiet); both sides with
  `clientBodyTimeout: --body-timeout`.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from .hostile import (
    CLIENTS,
    SIDES,
    MiB,
    Row,
    Settings,
    bench_model,
    config,
    get,
    med,
    ordinary_during,
    two_swapd,
)
from .paired import median_interval, paired, rotated
from .swapd_run import RunningSwapd


def _rps_row(what: str, settings: Settings, rps: dict[str, list[float]]) -> Row:
    ratio, low, high = median_interval(paired(rps["hostile"], rps["quiet"]))
    return Row(
        f"ordinary client req/s (c={settings.connections}) during: {what}",
        f"{med(rps['quiet']):.0f}",
        f"{med(rps['hostile']):.0f}  ({ratio:.2f}x, 90% {low:.2f}-{high:.2f})",
        "ordinary",
        ratio,
    )


def _running(swapd: RunningSwapd) -> dict[str, object]:
    return dict(json.loads(get(swapd, "/running")))


def _subscribers(swapd: RunningSwapd) -> int:
    proxy = _running(swapd)["proxy"]
    assert isinstance(proxy, dict)
    return int(proxy["events"]["subscribers"])


def _until(check: object, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def _peak_reset(proc: psutil.Process) -> None:
    Path(f"/proc/{proc.pid}/clear_refs").write_text("5")


def _peak(proc: psutil.Process) -> int:
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def _raw(swapd: RunningSwapd, head: str, body: bytes = b"") -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", swapd.port))
    sock.sendall(f"{head}\r\nHost: 127.0.0.1:{swapd.port}\r\n\r\n".encode() + body)
    return sock


# ------------------------------------------------------------------------------------------------
# stalled subscribers while a model writes


def readers_rows(settings: Settings) -> list[Row]:
    top = "groups:\n  all:\n    swap: false\n    members: [bench, talker]\n"
    idle: dict[str, list[float]] = {side: [] for side in SIDES}
    peak: dict[str, list[float]] = {side: [] for side in SIDES}
    rps: dict[str, list[float]] = {side: [] for side in SIDES}
    size = settings.output_mb * 1_000_000
    with two_swapd(lambda: config(bench_model("talker"), top=top)) as sides:
        for swapd in sides.values():
            get(swapd, "/upstream/talker/output?bytes=10")  # `talker` loaded too
        for round_no in range(settings.rounds):
            for side in rotated(SIDES, round_no):
                swapd = sides[side]
                proxy = swapd.proxy
                idle[side].append(proxy.memory_info().rss)
                count = settings.stalled if side == "hostile" else 0
                stalled = [_raw(swapd, "GET /api/events HTTP/1.1") for _ in range(count)]
                try:
                    _until(lambda s=swapd, n=count: _subscribers(s) == n, "subscribers")
                    _peak_reset(proxy)
                    end = f"round-{round_no}-{side}-done"

                    def write(stop: threading.Event, s: RunningSwapd = swapd, e: str = end) -> None:
                        get(s, f"/upstream/talker/output?bytes={size}&end={e}")
                        # ... and followed to its end by the proxy (its combined log has it).
                        _until(lambda: e.encode() in get(s, "/logs"), "the output followed")

                    rps[side].append(ordinary_during(swapd, settings, write))
                    peak[side].append(_peak(proxy))
                finally:
                    for sock in stalled:
                        sock.close()
                _until(lambda s=swapd: _subscribers(s) == 0, "subscribers gone")
    grown = [p - i for p, i in zip(peak["hostile"], idle["hostile"], strict=True)]
    return [
        Row(
            "proxy RSS, idle (before)",
            f"{med(idle['quiet']) / MiB:.0f} MiB",
            f"{med(idle['hostile']) / MiB:.0f} MiB",
        ),
        Row(
            f"proxy RSS at its peak while a model writes {settings.output_mb} MB in one line "
            f"(hostile: {settings.stalled} /api/events subscribers reading nothing)",
            f"{med(peak['quiet']) / MiB:.0f} MiB",
            f"{med(peak['hostile']) / MiB:.0f} MiB  (+{max(grown) / MiB:.0f} MiB, worst round)",
            "readers_rss",
            max(grown) / MiB,
        ),
        _rps_row(f"a model writing {settings.output_mb} MB, stalled subscribers", settings, rps),
    ]


# ------------------------------------------------------------------------------------------------
# many subscribers, idle


@contextmanager
def _many_subscribers(swapd: RunningSwapd, count: int) -> Iterator[None]:
    if count == 0:
        yield
        return
    argv = [sys.executable, str(CLIENTS), "subscribers", swapd.url, str(count)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the subscribers did not connect")
        yield
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(60)


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def subscribers_rows(settings: Settings) -> list[Row]:
    idle_models = "".join(bench_model(f"idle-{i}") for i in range(1, 7))  # 7 models with `bench`
    cpu: dict[str, list[float]] = {side: [] for side in SIDES}
    rps: dict[str, list[float]] = {side: [] for side in SIDES}
    with two_swapd(lambda: config(idle_models)) as sides:
        for round_no in range(settings.rounds):
            for side in rotated(SIDES, round_no):
                swapd = sides[side]
                proxy = swapd.proxy
                count = settings.subscribers if side == "hostile" else 0
                with _many_subscribers(swapd, count):
                    _until(lambda s=swapd, n=count: _subscribers(s) == n, "subscribers")
                    time.sleep(1.0)  # their histories sent
                    before, started = _cpu(proxy), time.monotonic()
                    time.sleep(settings.idle_seconds)
                    used = _cpu(proxy) - before
                    cpu[side].append(used / (time.monotonic() - started))
                    rps[side].append(ordinary_during(swapd, settings))
                _until(lambda s=swapd: _subscribers(s) == 0, "subscribers gone")
    return [
        Row(
            f"idle proxy CPU, 7 models (hostile: {settings.subscribers} /api/events subscribers)",
            f"{med(cpu['quiet']) * 100:.1f} % of a core",
            f"{med(cpu['hostile']) * 100:.1f} % of a core",
            "subscribers_cpu",
            med(cpu["hostile"]) * 100,
        ),
        _rps_row(f"{settings.subscribers} subscribers connected", settings, rps),
    ]


# ------------------------------------------------------------------------------------------------
# a swap behind a stalled upload


def _in_flight(swapd: RunningSwapd, model: str) -> int:
    running = _running(swapd)["running"]
    assert isinstance(running, list)
    return sum(int(m.get("in_flight", 0)) for m in running if m["model"] == model)


class SwapBehindUpload:
    """The work of a round: (hostile) a stalled upload to `x`, then a request for `y`, which
    swaps `x` out; `delay` is how long that request took."""

    def __init__(self, swapd: RunningSwapd, *, hostile: bool) -> None:
        self.swapd = swapd
        self.hostile = hostile
        self.delay = float("nan")

    def __call__(self, stop: threading.Event) -> None:
        swapd = self.swapd
        held = None
        if self.hostile:  # 10 bytes of 100,000, then nothing
            head = "POST /upstream/x/upload HTTP/1.1\r\nContent-Length: 100000"
            held = _raw(swapd, head, b"0123456789")
            _until(lambda: _in_flight(swapd, "x") == 1, "the upload in flight")
        started = time.monotonic()
        try:
            get(swapd, "/upstream/y/health", timeout=600)
        finally:
            if held is not None:
                held.close()
        self.delay = time.monotonic() - started


def upload_rows(settings: Settings) -> list[Row]:
    top = (
        f"clientBodyTimeout: {settings.body_timeout}\n"
        "groups:\n"
        "  steady:\n    swap: false\n    exclusive: false\n    members: [bench]\n"
        "  pair:\n    swap: true\n    exclusive: false\n    members: [x, y]\n"
    )
    delay: dict[str, list[float]] = {side: [] for side in SIDES}
    rps: dict[str, list[float]] = {side: [] for side in SIDES}
    with two_swapd(lambda: config(bench_model("x") + bench_model("y"), top=top)) as sides:
        for round_no in range(settings.rounds):
            for side in rotated(SIDES, round_no):
                swapd = sides[side]
                get(swapd, "/upstream/x/health")  # x loaded, y not
                swap = SwapBehindUpload(swapd, hostile=side == "hostile")
                rps[side].append(ordinary_during(swapd, settings, swap))
                delay[side].append(swap.delay)
    extra = med(delay["hostile"]) - med(delay["quiet"])
    return [
        Row(
            "a swap's delay (x to y) behind one stalled upload to x "
            f"(clientBodyTimeout {settings.body_timeout:g} s)",
            f"{med(delay['quiet']):.2f} s",
            f"{med(delay['hostile']):.2f} s  (+{extra:.2f} s)",
            "upload_delay",
            extra - settings.body_timeout,
        ),
        _rps_row("a stalled upload holding a swap", settings, rps),
    ]
