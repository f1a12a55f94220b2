"""What the side-by-side proxy benchmarks are made of: `wrk` and its small JSON POST, nginx as the
upstream (and as the reference reverse proxy), the swapd config of the `bench` model pointed at
that upstream, and the CPU time of the proxy processes measured.

`swapd_run.py` runs swapd itself, `contenders.py` the other proxies measured beside it; the
benchmarks (`proxy_pipeline`, `proxy_floor`, `pipeline_cost`, `observability_cost`) import these
from here.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil

from tests.support.paths import UPSTREAMS
from tests.support.ports import free_port

from .swapd_run import wait_http_ok

FAKE_MODEL = UPSTREAMS / "fake_model.py"
BODY = '{"model":"bench","messages":[{"role":"user","content":"hi"}]}'
WRK_SCRIPT = f"""
wrk.method = "POST"
wrk.body = '{BODY}'
wrk.headers["Content-Type"] = "application/json"
"""
# One worker, no access log, temp files in the run's own folder; `{servers}` is the http block's.
NGINX_CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
{servers}
}}
"""
# The upstream answering `return 200`, and nginx as a reverse proxy to it (keep-alive pool).
UPSTREAM_AND_PROXY = """
  upstream fast {{ server 127.0.0.1:{upstream}; keepalive 256; }}
  server {{ listen 127.0.0.1:{upstream}; location / {{ return 200 "ok"; }} }}
  server {{
    listen 127.0.0.1:{proxy};
    location / {{ proxy_pass http://fast; proxy_http_version 1.1; proxy_set_header Connection ""; }}
  }}"""
BENCH_MODEL = """
  bench:
    cmd: sleep 1000000
    proxy: http://127.0.0.1:{port}
    checkEndpoint: /
    concurrencyLimit: 100000
"""


def post_script(tmp: Path) -> Path:
    """wrk's Lua script for the small JSON POSTs every target is measured with."""
    script = tmp / "post.lua"
    script.write_text(WRK_SCRIPT)
    return script


def bench_config(upstream_port: int, *, head: str = "", models: str = "", tail: str = "") -> str:
    """A swapd config whose model `bench` is the upstream on `upstream_port` (no process of its
    own to start: `sleep`); `head` goes before `models:`, `models` after `bench`, `tail` last."""
    return f"\n{head}models:{BENCH_MODEL.format(port=upstream_port)}{models}{tail}"


@contextlib.contextmanager
def nginx_serving(tmp: Path, servers: str, ready: tuple[str, ...]) -> Iterator[None]:
    """nginx with `servers` in its http block, until the urls in `ready` answer 200."""
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, servers=servers))
    proc = subprocess.Popen(
        ["nginx", "-c", str(conf), "-p", str(tmp)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for url in ready:
            wait_http_ok(url, 10)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def nginx(tmp: Path) -> Iterator[tuple[str, str]]:
    """(the upstream's url, nginx-as-reverse-proxy's url)."""
    upstream, proxy = free_port(), free_port()
    urls = f"http://127.0.0.1:{upstream}", f"http://127.0.0.1:{proxy}"
    servers = UPSTREAM_AND_PROXY.format(upstream=upstream, proxy=proxy)
    with nginx_serving(tmp, servers, (urls[0] + "/", urls[1] + "/")):
        yield urls


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def wrk(url: str, connections: int, seconds: float, script: Path) -> tuple[float, float]:
    """(requests/s, median latency in ms)."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw errors against {url}:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    value, unit = re.search(r"50%\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    return rps, float(value) * scale


def bench_and_sse_config(upstream_port: int, sse_port: int, streams: int) -> str:
    """`bench`, and tests/support/upstreams/fake_model.py as `sse` on `sse_port` (streams, SSE),
    both loaded at once; `streams`: how many requests `sse` admits at a time."""
    sse = f"""  sse:
    cmd: {sys.executable} {FAKE_MODEL} --port {sse_port} --name sse
    proxy: http://127.0.0.1:{sse_port}
    concurrencyLimit: {streams}
"""
    groups = """groups:
  bench:
    swap: false
    members: [bench, sse]
"""
    return bench_config(upstream_port, head="healthCheckTimeout: 15\n", models=sse, tail=groups)
