"""The CPU one request's observability costs, stage by stage, in one process (issue 12): the
proxy's recorder (`begin`/`end`/`note` on the request's way, `take` and the report's encoding
every batch), the daemon's observer (decoding the report, building the records with their token
counts, redacting and keeping the captures, numbering, the Prometheus figures, encoding the
`ActivityAdded` event of the batch's ids) and a proxy's events hub rendering the `activity` and
passing the in-flight frames on to one `/api/events` subscriber. Three columns: captures off,
and on (`captureBuffer` 5 MB, llama-swap's default, a chat client's request head with an API
key), both with one subscriber; and captures off with no `/api/events` client anywhere (the
daemon announces nothing then).

`observability_cost.py` measures the same against the whole pipeline with real processes, but
on a shared 2-core machine its figures move by tens of percent from run to run; this one runs
the same code in a tight loop (CPU time, `time.process_time`, median of `--repeat` runs), so a
change to any stage shows. What a request costs in all, on and off: `observability_cost.py`'s
"CPU/request in the proxy" (about 115 to 170 us here).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from swapd.daemon.config import Config
from swapd.daemon.observe.service import Observer
from swapd.ipc import codec
from swapd.ipc.messages import ActivityReport, Event
from swapd.proxy.floor.account import Account, TeeBudget
from swapd.proxy.mirror.state import ProxyState
from swapd.proxy.observe.activity import Recorder
from swapd.proxy.observe.events import EventHub, Subscriber

from .harness.report import Report

# What observability_cost.py's nginx answers: OpenAI usage and llama.cpp timings.
REPLY = (
    b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":'
    b'{"role":"assistant","content":"ok"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15},'
    b'"timings":{"prompt_n":12,"predicted_n":3,"prompt_per_second":900.5,'
    b'"predicted_per_second":61.2,"cache_n":0}}'
)


class _Endpoint:
    """The daemon's endpoint as the observer uses it: events encoded as the real one does."""

    def __init__(self) -> None:
        self.out: list[bytes] = []

    def publish_nowait(self, make: Callable[[int], Event]) -> None:
        self.out.append(codec.encode(make(1)))

    async def reply(self, identity: bytes, reply: object) -> None:
        pass


# A chat client's request head, as the proxy reads it (the key is a secret the capture redacts).
HEADERS = {
    "Host": "127.0.0.1:8080",
    "User-Agent": "OpenAI/Python 1.40.0",
    "Accept": "application/json",
    "Accept-Encoding": "gzip, deflate",
    "Authorization": "Bearer sk-bench",
    "Content-Type": "application/json",
    "Content-Length": "93",
    "X-Stainless-Lang": "python",
}
REQUEST = b'{"model":"bench","messages":[{"role":"user","content":"Say ok."}],"max_tokens":3}'
CAPTURE_BYTES = 5 * 1024 * 1024  # llama-swap's default captureBuffer


async def _run(requests: int, batch: int, keep: int, watched: bool = True) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    reports: list[ActivityReport] = []
    recorder = Recorder("bench-1", reports.append, ProxyState(), TeeBudget())
    endpoint = _Endpoint()
    observer = Observer(Config(), "bench", endpoint, lambda: (), _no_gpus)
    hub = EventHub(ProxyState(1))
    subscriber = Subscriber()
    if watched:  # the proxy's Hello says it has an `/api/events` client
        observer.watching(recorder.proxy_id, 1)
        hub.subscribers.add(subscriber)
    incoming = [
        make_mocked_request("POST", "/v1/chat/completions", headers=HEADERS) for _ in range(batch)
    ]
    response = web.Response(body=REPLY, content_type="application/json")
    spent = {"proxy: begin/end/note": 0.0, "proxy: batch": 0.0, "daemon": 0.0, "events": 0.0}
    clock = time.process_time
    for _ in range(requests // batch):
        t0 = clock()
        accounts = []
        for request in incoming:
            acc = Account(route="model", model="bench", started=loop.time())
            recorder.begin(request, acc)
            recorder.decide(acc, True, "POST")  # the pipeline's: a POST to a model route
            acc.keep = keep  # what `begin` reads from the routing table's `captureBuffer`
            acc.req_body = REQUEST if keep else None
            accounts.append(acc)
        for request, acc in zip(incoming, accounts, strict=True):
            acc.body = REPLY
            acc.content_type = "application/json"
            recorder.note(request, response, acc)
            recorder.end(acc)
        t1 = clock()
        recorder.flush()
        wire = [codec.encode(r) for r in reports]
        reports.clear()
        t2 = clock()
        for raw in wire:
            message = codec.decode_inbound(raw)
            assert isinstance(message, ActivityReport)
            observer.report(message)
        t3 = clock()
        for raw in endpoint.out:
            hub.event(codec.decode_event(raw))
        endpoint.out.clear()
        _drain(subscriber)
        t4 = clock()
        spent["proxy: begin/end/note"] += t1 - t0
        spent["proxy: batch"] += t2 - t1
        spent["daemon"] += t3 - t2
        spent["events"] += t4 - t3
    return {k: v / requests * 1e6 for k, v in spent.items()}


def _drain(subscriber: Subscriber) -> None:
    """What the subscriber's writer takes off its backlog."""
    subscriber.take()


async def _no_gpus() -> tuple[()]:
    return ()


def main(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser(
        "python -m benchmarks observability_micro", description=__doc__
    )
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=32, help="requests per report")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"observability CPU per request, median of {args.repeat} runs, {time.ctime()}")
    heads = ("captures off", "captures on", "nobody watching")
    print(f"  {'':22s}" + "".join(f" {head:>15s}" for head in heads))
    columns = []
    for keep, watched in ((0, True), (CAPTURE_BYTES, True), (0, False)):
        runs = [
            asyncio.run(_run(args.requests, args.batch, keep, watched)) for _ in range(args.repeat)
        ]
        columns.append({stage: statistics.median(r[stage] for r in runs) for stage in runs[0]})
    for stage in columns[0]:
        print(f"  {stage:22s}" + "".join(f" {c[stage]:12.2f} us" for c in columns))
    print(f"  {'all':22s}" + "".join(f" {sum(c.values()):12.2f} us" for c in columns))
    report.figure("cpu_us_per_request", dict(zip(heads, columns, strict=True)))
    return 0
