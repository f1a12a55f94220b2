"""The proxies measured beside swapd, each a process of its own: the floor (aiohttp's server
forwarding through swapd's lean pool with no features, `pipeline_floor.py`), a bare aiohttp proxy
(aiohttp's `web.Application` and `ClientSession`, as one writes it in 30 lines), and the fake
model served directly (tests/support/upstreams/fake_model.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.support.ports import free_port

from .side_by_side import FAKE_MODEL
from .swapd_run import wait_http_ok

HARNESS = Path(__file__).resolve().parent
# For scale: the "bare 30-line aiohttp proxy" the targets are set against (reads the body, one
# pooled ClientSession, fixed upstream, no features).
BARE_PROXY = """
import sys
import aiohttp
import psutil
from aiohttp import web

UPSTREAM = sys.argv[2]


async def handle(request):
    body = await request.read()
    headers = {"Content-Type": request.headers.get("Content-Type", "")}
    async with request.app["session"].request(
        request.method, UPSTREAM + request.raw_path, data=body, headers=headers
    ) as upstream:
        return web.Response(status=upstream.status, body=await upstream.read())


async def session(app):
    app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    yield
    await app["session"].close()


app = web.Application()
app.cleanup_ctx.append(session)
app.router.add_route("*", "/{tail:.*}", handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


def own_session() -> bool:
    """Whether each proxy measured runs in a session of its own. circusd starts swapd's proxy
    with `setsid()`, and where the kernel groups tasks by session for scheduling
    (`/proc/sys/kernel/sched_autogroup_enabled`, on by default in most desktop and many
    server kernels), a session is one scheduling group: on a busy machine the proxy then gets
    one group's share of the CPU while a reference started in the benchmark's own session
    shares the benchmark's group (with wrk and nginx) and gets a different share. Every proxy
    in its own session is measured under the same rule. `SWAPD_BENCH_SAME_SESSION=1` keeps
    the references in the benchmark's session, to see the difference."""
    return os.environ.get("SWAPD_BENCH_SAME_SESSION", "") != "1"


@contextlib.contextmanager
def serving(argv: list[str], ready: str) -> Iterator[tuple[str, int]]:
    """(its url, its pid): `argv` started in a session of its own, until `ready` answers 200."""
    port = free_port()
    proc = subprocess.Popen([a.format(port=port) for a in argv], start_new_session=own_session())
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http_ok(url + ready, 15, interval=0.05)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def floor(upstream_port: int) -> Iterator[tuple[str, int]]:
    script = str(HARNESS / "pipeline_floor.py")
    with serving([sys.executable, script, "{port}", str(upstream_port)], "/") as served:
        yield served


@contextlib.contextmanager
def bare_proxy(tmp: Path, upstream: str) -> Iterator[tuple[str, int]]:
    script = tmp / "bare_proxy.py"
    script.write_text(BARE_PROXY)
    with serving([sys.executable, str(script), "{port}", upstream], "/") as served:
        yield served


@contextlib.contextmanager
def fake_model(name: str = "sse-direct") -> Iterator[str]:
    """The fake model on a port of its own, no proxy in front."""
    argv = [sys.executable, str(FAKE_MODEL), "--port", "{port}", "--name", name]
    with serving(argv, "/health") as (url, _):
        yield url
