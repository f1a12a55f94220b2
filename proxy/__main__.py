"""Entry point of the proxy process:
`python -m swapd.proxy --run-dir DIR (--fd N | --listen HOST:PORT) [--processes N]
[--shutdown-grace SECONDS] [--tls-cert-file FILE --tls-key-file FILE]`.

Under circus every proxy process gets the same already-bound listening socket as fd N (the
watcher's `$(circus.sockets.swapd)`), so `numprocesses` proxies share one port and the kernel
balances accepts.
`--listen` binds a port of its own, for running the proxy without circus.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import resource
import signal
import socket
import ssl
import sys
from collections.abc import Callable
from pathlib import Path

from .app import make_app
from .context import CTX
from .dispatch import Stages
from .server import serve


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m swapd.proxy", description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True, help="the daemon's run directory")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--fd", type=int, help="an inherited, bound, listening socket")
    where.add_argument("--listen", help="HOST:PORT to bind (standalone, without circus)")
    parser.add_argument(
        "--processes",
        type=int,
        default=int(os.environ.get("SWAPD_PROXY_PROCESSES", "1") or 1),
        help="how many proxy processes share the port (splits concurrencyLimit); "
        "default $SWAPD_PROXY_PROCESSES or 1",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=float(os.environ.get("SWAPD_PROXY_SHUTDOWN_GRACE", "30") or 30),
        help="on SIGTERM, how long requests under way may run before they are ended; "
        "default $SWAPD_PROXY_SHUTDOWN_GRACE or 30",
    )
    parser.add_argument("--log-level", default=os.environ.get("SWAPD_PROXY_LOG_LEVEL", "INFO"))
    parser.add_argument("--tls-cert-file", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key-file", help="the certificate's private key (PEM)")
    return parser.parse_args(argv)


def _tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The server side of TLS (`swapd run --tls-cert-file/--tls-key-file`): Python's defaults
    for a server (TLS 1.2 and later), the certificate read once at start."""
    if not args.tls_cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.tls_cert_file, args.tls_key_file)
    return context


def _split_host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return (host.strip("[]") or "0.0.0.0"), int(port)


async def _serve(args: argparse.Namespace, stages: Stages) -> None:
    app = make_app(run_dir=args.run_dir, processes=max(1, args.processes), stages=stages)
    loop = asyncio.get_running_loop()
    tls = _tls(args)

    async def create_server(factory: Callable[[], asyncio.Protocol]) -> asyncio.Server:
        if args.fd is not None:
            sock = socket.socket(fileno=args.fd)
            sock.setblocking(False)
            return await loop.create_server(factory, sock=sock, backlog=4096, ssl=tls)
        host, port = _split_host_port(args.listen)
        return await loop.create_server(
            factory, host, port, reuse_address=True, backlog=4096, ssl=tls
        )

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    grace = max(0.0, args.shutdown_grace)
    await serve(app, lambda a: a[CTX], create_server, stop, grace, stages)


def _raise_fd_limit() -> None:
    """Each open stream costs two descriptors (client and upstream): use all the system allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None, stages: Stages | None = None) -> int:
    """`stages`: a benchmark's stand-ins for some stages (`dispatch.Stages`); `python -m`
    passes none."""
    args = _parse_args(argv)
    _raise_fd_limit()
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s swapd-proxy[%(process)d] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_serve(args, stages or Stages()))
    return 0


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when installed (a dependency on Linux): a cheaper event loop for every request."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


if __name__ == "__main__":
    sys.exit(main())
