"""`swapd run`: write the circus config into the run directory, then become circusd.

circusd replaces this process (`os.execv`), so under systemd the main pid is circusd itself and
its SIGTERM handling (stop every watcher, exit 0) is what Ctrl-C and `systemctl stop` reach.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import socket
import ssl
import sys
from pathlib import Path

from ...ipc.endpoints import Endpoints, default_run_dir, ensure_private_dir
from ..config import Config, default_config_path, describe_default
from ..machinery import gpu
from . import circus_config

# circusd must outlast the daemon's own shutdown (cmdStop of every model, in parallel).
_SHUTDOWN_MARGIN = 10.0
# Loopback unless told otherwise (llama-swap listens on every interface: docs/migrating...).
DEFAULT_LISTEN = "127.0.0.1:8080"
DEFAULT_TLS_LISTEN = "127.0.0.1:8443"


def _check_port_free(host: str, port: int) -> str | None:
    with socket.socket(circus_config.address_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"{host}:{port} is already in use (another swapd, or another server?)"
            return f"cannot listen on {host}:{port}: {exc.strerror}"
    return None


def _check_not_running(endpoints: Endpoints) -> str | None:
    """Another swapd in the same run directory would lose its sockets to this one."""
    if not Path(endpoints.circus_ctl.removeprefix("ipc://")).exists():
        return None
    from circus.client import CircusClient
    from circus.exc import CallError

    client = CircusClient(endpoint=endpoints.circus_ctl, timeout=0.5)
    try:
        client.call({"command": "list", "properties": {}})
    except CallError:
        return None  # a stale socket of a swapd that is gone
    finally:
        client.stop()
    return (
        f"a swapd is already running in {endpoints.run_dir}; stop it first, or give this one "
        "its own --run-dir"
    )


def _check_gpus(config: Config) -> str | None:
    # The daemon checks again at its start; checking here turns a broken driver into one clear
    # error and exit 1, not a daemon that circusd restarts in a loop.
    quiet = logging.getLogger(gpu.log.name)
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # the daemon logs NVML's absence, once
    try:
        backend = gpu.make_backend()
    except gpu.GpuError as exc:
        return str(exc)
    finally:
        quiet.setLevel(level)
    try:
        gpu.verify_gpus(backend, config)
    except gpu.GpuError as exc:
        return str(exc)
    finally:
        backend.close()
    return None


def _check_tls(cert: Path | None, key: Path | None) -> tuple[tuple[Path, Path] | None, str | None]:
    """The certificate and key files (absolute), when both are given and make a usable pair."""
    if cert is None and key is None:
        return None, None
    if cert is None or key is None:
        return None, "both --tls-cert-file and --tls-key-file must be provided for TLS"
    pair = (cert.resolve(), key.resolve())
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(*pair)
    except (OSError, ssl.SSLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return None, f"cannot use --tls-cert-file {cert} with --tls-key-file {key}: {why}"
    return pair, None


def main(args: argparse.Namespace) -> int:
    from ..config import ConfigError, ConfigSources, load_config

    tls, problem = _check_tls(args.tls_cert_file, args.tls_key_file)
    if problem:
        print(f"swapd: {problem}", file=sys.stderr)
        return 2
    listen = args.listen or (DEFAULT_TLS_LISTEN if tls else DEFAULT_LISTEN)
    try:
        host, port = circus_config.parse_listen(listen)
    except circus_config.ListenAddressError as exc:
        print(f"swapd: {exc}", file=sys.stderr)
        return 2
    if args.proxy_processes < 1:
        print("swapd: --proxy-processes must be at least 1", file=sys.stderr)
        return 2
    if not args.shutdown_grace >= 0:
        print("swapd: --shutdown-grace must be a number of seconds, 0 or more", file=sys.stderr)
        return 2

    # The embedded config's cmd says ${env.SWAPD_PYTHON}; the daemon re-reads the file with the
    # environment circusd passes on, so export it before loading and before exec.
    os.environ["SWAPD_PYTHON"] = sys.executable
    config_dir = getattr(args, "config_dir", None)
    is_embedded = args.config is None and config_dir is None
    config_path = (
        default_config_path()
        if is_embedded
        else (Path(args.config).resolve() if args.config is not None else None)
    )
    sources = ConfigSources(config_path, Path(config_dir).resolve() if config_dir else None)
    try:
        config = load_config(sources)
    except ConfigError as exc:
        print(f"swapd: invalid config {sources}:\n{exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"swapd: cannot read config {sources}: {exc.strerror}", file=sys.stderr)
        return 1

    problem = _check_gpus(config) or _check_port_free(host, port)
    if problem:
        print(f"swapd: {problem}", file=sys.stderr)
        return 1

    run_dir = Path(args.run_dir) if args.run_dir is not None else default_run_dir()
    run_dir = ensure_private_dir(run_dir.resolve())
    endpoints = Endpoints(run_dir)
    problem = _check_not_running(endpoints)
    if problem:
        print(f"swapd: {problem}", file=sys.stderr)
        return 1
    ensure_private_dir(endpoints.log_dir)
    # A fresh swapd: its daemon runs the preload (a daemon restarted under it does not).
    (run_dir / circus_config.PRELOADED_FILE).unlink(missing_ok=True)
    unload_timeouts = [m.unload_timeout for m in config.models.values()] or [0.0]
    layout = circus_config.CircusLayout(
        endpoints=endpoints,
        config_path=sources.file,
        config_dir=sources.directory,
        listen_host=host,
        listen_port=port,
        python=sys.executable,
        proxy_processes=args.proxy_processes,
        daemon_graceful_timeout=args.shutdown_grace + max(unload_timeouts) + _SHUTDOWN_MARGIN,
        shutdown_grace=args.shutdown_grace,
        watch_config=args.watch_config,
        tls=tls,
    )
    ini = circus_config.write(layout)
    if is_embedded:
        print(describe_default(f"{host}:{port}"))
    scheme = "https" if tls else "http"
    print(f"swapd: run dir {run_dir}, listening on {scheme}://{host}:{port}", flush=True)
    os.environ["CIRCUSCTL_ENDPOINT"] = endpoints.circus_ctl
    argv = [sys.executable, "-m", "swapd.daemon.cli.circusd", "--log-output", "-", str(ini)]
    sys.stderr.flush()
    os.execv(sys.executable, argv)
    return 0  # not reached
