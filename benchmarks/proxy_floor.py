"""Where the latency a proxy adds at one connection comes from, layer by layer, in one run.

Side by side at one connection (wrk, small JSON POSTs, median latency), against the same nginx
upstream answering `return 200`:
* direct, and nginx as a reverse proxy (as in proxy_pipeline.py);
* a uvloop byte relay (no HTTP parsing at all): the floor of one more loopback hop in Python;
* aiohttp's low-level server answering a fixed body itself, with no upstream: aiohttp's own cost;
* aiohttp's low-level server forwarding through swapd's pooled upstream client;
* swapd (circusd + daemon + proxy: aiohttp's server and swapd's pipeline).

No target: it says where the latency goes. Needs wrk and nginx.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.ports import free_port

from .harness.report import Report
from .harness.side_by_side import bench_config, nginx, post_script, wrk
from .harness.swapd_run import RunningSwapd, wait_http_ok

# Each runs as `python SCRIPT LISTEN_PORT UPSTREAM_PORT`.
REFERENCES = {
    "byte relay": """
import asyncio, sys, uvloop
UP = int(sys.argv[2])
class Upstream(asyncio.Protocol):
    def __init__(self, client): self.client = client
    def data_received(self, data): self.client.write(data)
class Client(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.upstream, self.early = transport, None, []
        asyncio.get_running_loop().create_task(self.connect())
    async def connect(self):
        loop = asyncio.get_running_loop()
        self.upstream, _ = await loop.create_connection(
            lambda: Upstream(self.transport), "127.0.0.1", UP)
        for data in self.early: self.upstream.write(data)
    def data_received(self, data):
        if self.upstream is None: self.early.append(data)
        else: self.upstream.write(data)
async def main():
    await asyncio.get_running_loop().create_server(Client, "127.0.0.1", int(sys.argv[1]))
    await asyncio.Event().wait()
uvloop.run(main())
""",
    "aiohttp, no upstream": """
import asyncio, sys, uvloop
from aiohttp import web
async def handler(request):
    await request.read()
    return web.Response(text="ok")
async def main():
    server = web.Server(handler, access_log=None)
    await asyncio.get_running_loop().create_server(server, "127.0.0.1", int(sys.argv[1]))
    await asyncio.Event().wait()
uvloop.run(main())
""",
    "aiohttp + pool": """
import asyncio, sys, uvloop
from aiohttp import web
from swapd.proxy.upstream.pool import UpstreamPool
UP = int(sys.argv[2])
pool = UpstreamPool()
async def handler(request):
    body = await request.read()
    head = (b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: 127.0.0.1:%d\\r\\n"
            b"Content-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n" % (UP, len(body)))
    upstream = await pool.request("127.0.0.1", UP, head, body)
    data = await upstream.read()
    return web.Response(status=upstream.status, body=data, headers=upstream.headers)
async def main():
    server = web.Server(handler, access_log=None)
    await asyncio.get_running_loop().create_server(server, "127.0.0.1", int(sys.argv[1]))
    await asyncio.Event().wait()
uvloop.run(main())
""",
}


@contextlib.contextmanager
def reference(tmp: Path, script: Path, name: str, source: str, upstream_port: str) -> Iterator[str]:
    program = tmp / (name.replace(" ", "_").replace(",", "").replace("+", "plus") + ".py")
    program.write_text(source)
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(program), str(port), upstream_port])
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        while True:  # the byte relay answers only what its upstream answers: probe with wrk
            try:
                wrk(url + "/v1/chat/completions", 1, 1, script)
                break
            except (subprocess.CalledProcessError, RuntimeError):
                if time.monotonic() > deadline:
                    raise
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def main(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks proxy_floor", description=__doc__)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="swapd-bench-floor-") as tmp_name:
        tmp = Path(tmp_name)
        script = post_script(tmp)
        with contextlib.ExitStack() as stack:
            direct, via_nginx = stack.enter_context(nginx(tmp))
            upstream_port = direct.rsplit(":", 1)[1]
            targets = {"direct": direct, "nginx": via_nginx}
            for name, source in REFERENCES.items():
                targets[name] = stack.enter_context(
                    reference(tmp, script, name, source, upstream_port)
                )
            config = bench_config(int(upstream_port))
            swapd = stack.enter_context(RunningSwapd(config))
            wait_http_ok(swapd.url + "/upstream/bench/", 30)
            targets["swapd"] = swapd.url
            latency: dict[str, list[float]] = {name: [] for name in targets}
            for _ in range(args.rounds):
                for name, base in targets.items():
                    _, p50 = wrk(base + "/v1/chat/completions", 1, args.seconds, script)
                    latency[name].append(p50)
    direct_ms = statistics.median(latency["direct"])
    print(f"median latency at 1 connection, {args.rounds} rounds of {args.seconds} s:")
    for name, values in latency.items():
        median = statistics.median(values)
        rounds = ", ".join(f"{v:.3f}" for v in values)
        print(f"  {name:22s} {median:.3f} ms   adds {median - direct_ms:+.3f} ms   ({rounds})")
    report.figure("p50_ms", latency)
    return 0
