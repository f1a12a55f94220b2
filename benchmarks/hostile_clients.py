"""What one hostile or careless client costs everyone else (issue 29), side by side in one run:
two swapd run at once from the same config, `quiet` (no hostile client) and `hostile` (one), and
each row compares a figure of the two. Rounds alternate the sides in a rotating order
(`harness/paired.py`), so what the machine's neighbours do to one they mostly do to the other.

Rows (`ROWS`; each a function of the settings that returns its rows; the shared pieces are in
`harness/hostile.py`, the rows other than `metrics` in `harness/hostile_rows.py`, whose docstring
says what each measures: `readers`, `subscribers`, `upload`):

- `metrics`: `/metrics` after `--names` requests each naming a model that does not exist (every
  tenth shaped like an API key) against after none: its size, the time a scrape takes, the
  daemon's longest stall while a scrape is rendered (the longest round trip of back-to-back
  `Status` requests to the daemon's socket, the way `swapd status` asks), the daemon's RSS; and
  the requests per second of an ordinary client (`harness/load_clients.py ordinary`) while new names
  keep coming at `--rate` a second, with Prometheus scraping every second on both sides.

The models are tests/support/upstreams/fake_model.py (`bench`: an OpenAI-compatible server).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import zmq

from swapd.ipc import codec
from swapd.ipc.endpoints import Endpoints
from swapd.ipc.messages import Status

from .harness import hostile_rows
from .harness.hostile import (
    SIDES,
    Row,
    Settings,
    Work,
    clients,
    med,
    ordinary_during,
    two_swapd,
)
from .harness.paired import median_interval, paired, rotated
from .harness.report import Report
from .harness.swapd_run import RunningSwapd

# ------------------------------------------------------------------------------------------------
# clients


def send_names(swapd: RunningSwapd, count: int, rate: float = 0.0) -> tuple[int, int]:
    sent, not_found = clients("names", swapd.url, count, rate, 8).split()
    return int(sent), int(not_found)


def scrape(swapd: RunningSwapd, timeout: float = 30.0) -> tuple[int, int, float]:
    """(status, bytes, seconds) of one `GET /metrics`."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(swapd.url + "/metrics", timeout=timeout) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, TimeoutError):
        status, body = 0, b""
    return status, len(body), time.perf_counter() - started


class StallProbe:
    """Back-to-back `Status` requests to the daemon while it runs: the longest round trip is the
    longest the daemon's loop kept it waiting (plus one ordinary round trip)."""

    def __init__(self, swapd: RunningSwapd) -> None:
        self.endpoint = Endpoints(swapd.run_dir).daemon
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint)
        try:
            n = 0
            while not self._stop.is_set():
                n += 1
                started = time.perf_counter()
                sock.send(codec.encode(Status(id=n)))
                if not sock.poll(60_000):
                    raise RuntimeError("the daemon did not answer a status within 60 s")
                sock.recv_multipart()
                self.longest = max(self.longest, time.perf_counter() - started)
        finally:
            sock.close()

    def __enter__(self) -> StallProbe:
        self._thread.start()
        time.sleep(0.05)  # its first round trips: the socket connected
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def scrape_every_second(swapd: RunningSwapd, until: threading.Event) -> None:
    """Prometheus: one scrape a second, the next only once the last one is answered."""
    while not until.is_set():
        started = time.monotonic()
        scrape(swapd)
        until.wait(max(0.0, 1.0 - (time.monotonic() - started)))


def scraping(swapd: RunningSwapd) -> Work:
    return lambda stop: scrape_every_second(swapd, stop)


def new_names(swapd: RunningSwapd, count: int, rate: float) -> Work:
    return lambda _stop: send_names(swapd, count, rate)


# ------------------------------------------------------------------------------------------------
# rows


def metrics_rows(settings: Settings) -> list[Row]:
    size: dict[str, list[float]] = {side: [] for side in SIDES}
    took: dict[str, list[float]] = {side: [] for side in SIDES}
    stall: dict[str, list[float]] = {side: [] for side in SIDES}
    failed: dict[str, int] = dict.fromkeys(SIDES, 0)
    rps: dict[str, list[float]] = {side: [] for side in SIDES}
    with two_swapd() as sides:
        started = time.monotonic()
        sent, not_found = send_names(sides["hostile"], settings.names)
        print(
            f"  {sent} unknown names sent in {time.monotonic() - started:.1f} s "
            f"({not_found} answered 404)",
            file=sys.stderr,
        )
        time.sleep(0.5)  # the proxy's last batch of records reaches the daemon
        for round_no in range(settings.rounds):
            for side in rotated(SIDES, round_no):
                swapd = sides[side]
                for _ in range(settings.scrapes):
                    with StallProbe(swapd) as probe:
                        status, length, seconds = scrape(swapd)
                    failed[side] += status != 200
                    if status == 200:  # an error's body says nothing of the figures' size
                        size[side].append(length)
                    took[side].append(seconds)
                    stall[side].append(probe.longest)
                work = [scraping(swapd)]
                if side == "hostile" and settings.rate > 0:
                    count = int(settings.rate * settings.seconds)
                    work.append(new_names(swapd, count, settings.rate))
                rps[side].append(ordinary_during(swapd, settings, *work))
        rss = {side: sides[side].daemon.memory_info().rss for side in SIDES}

    ratio, low, high = median_interval(paired(rps["hostile"], rps["quiet"]))
    return [
        Row(
            f"/metrics bytes, after {settings.names} unknown names vs none",
            f"{med(size['quiet']):,.0f}",
            f"{med(size['hostile']):,.0f}",
            "metrics_bytes",
            med(size["hostile"]) - med(size["quiet"]) if size["hostile"] else float("inf"),
        ),
        Row(
            "scrape time (median)",
            f"{med(took['quiet']) * 1000:.1f} ms",
            f"{med(took['hostile']) * 1000:.1f} ms",
            "scrape_time",
            (med(took["hostile"]) - 2 * med(took["quiet"])) * 1000,
        ),
        Row(
            "scrapes not answered 200",
            str(failed["quiet"]),
            str(failed["hostile"]),
            "scrapes_failed",
            failed["hostile"],
        ),
        Row(
            "daemon's longest stall during a scrape (Status round trip, median of scrapes)",
            f"{med(stall['quiet']) * 1000:.1f} ms",
            f"{med(stall['hostile']) * 1000:.1f} ms",
            "daemon_stall",
            (med(stall["hostile"]) - med(stall["quiet"])) * 1000,
        ),
        Row(
            "daemon RSS at the end",
            f"{rss['quiet'] / 2**20:.0f} MiB",
            f"{rss['hostile'] / 2**20:.0f} MiB",
        ),
        Row(
            f"ordinary client req/s (c={settings.connections}; hostile: {settings.rate:g} new "
            "names/s; both scraped every second)",
            f"{med(rps['quiet']):.0f}",
            f"{med(rps['hostile']):.0f}  ({ratio:.2f}x, 90% {low:.2f}-{high:.2f})",
            "ordinary",
            ratio,
        ),
    ]


ROWS: dict[str, Callable[[Settings], list[Row]]] = {
    "metrics": metrics_rows,
    "readers": hostile_rows.readers_rows,
    "subscribers": hostile_rows.subscribers_rows,
    "upload": hostile_rows.upload_rows,
}


def print_rows(rows: list[Row], report: Report) -> None:
    header = ("figure", "quiet", "hostile", "target")
    targets = report.bench.targets_by_key
    table = [header] + [
        (r.figure, r.quiet, r.hostile, targets[r.target].text if r.target else "") for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))


def main(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks hostile_clients", description=__doc__)
    parser.add_argument("--rows", default=",".join(ROWS), help=f"of {', '.join(ROWS)}")
    parser.add_argument("--names", type=int, default=20_000, help="unknown names sent first")
    parser.add_argument("--rate", type=float, default=100.0, help="new names a second, measuring")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="each ordinary client's run")
    parser.add_argument("--connections", type=int, default=4, help="the ordinary client's")
    parser.add_argument("--scrapes", type=int, default=3, help="timed scrapes a side a round")
    parser.add_argument("--output-mb", type=int, default=50, help="readers: what the model writes")
    parser.add_argument("--stalled", type=int, default=10, help="readers: stalled subscribers")
    parser.add_argument("--subscribers", type=int, default=1000, help="subscribers: how many")
    parser.add_argument(
        "--idle-seconds", type=float, default=5.0, help="subscribers: the idle CPU's window"
    )
    parser.add_argument(
        "--body-timeout", type=float, default=5.0, help="upload: clientBodyTimeout, both sides"
    )
    args = parser.parse_args(argv)
    settings = Settings(
        args.names,
        args.rate,
        args.rounds,
        args.seconds,
        args.connections,
        args.scrapes,
        output_mb=args.output_mb,
        stalled=args.stalled,
        subscribers=args.subscribers,
        idle_seconds=args.idle_seconds,
        body_timeout=args.body_timeout,
    )
    rows: list[Row] = []
    for name in args.rows.split(","):
        print(f"{name} ...", file=sys.stderr)
        for row in ROWS[name](settings):
            rows.append(row)
            if row.target:
                report.check(row.target, row.value, label=name)
    print_rows(rows, report)
    report.figure("rows", [vars(r) for r in rows])
    return 0
