"""The circus INI that `swapd run` writes into the run directory and hands to circusd.

Only `ipc://` control endpoints (files in the private run dir), multicast discovery off, no stats
process, exits noticed every second (`check_delay` is also circus's reap interval). Two static
watchers: the daemon (which adds `model-*` watchers at run time) and the proxy, which shares the
one listening socket circusd binds.
"""

from __future__ import annotations

import shlex
import socket
from dataclasses import dataclass
from pathlib import Path

from ...ipc.endpoints import PRELOADED_FILE, Endpoints
from ...ipc.watcher_names import DAEMON_WATCHER, PROXY_WATCHER
from ..policy.shutdown import DEFAULT_GRACE

__all__ = ["DAEMON_WATCHER", "PRELOADED_FILE", "PROXY_WATCHER"]

LISTEN_SOCKET = "swapd"
# circusd SIGKILLs a proxy this long after its shutdown grace.
PROXY_EXIT_MARGIN = 5.0


class ListenAddressError(ValueError):
    pass


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT`, `[v6]:PORT` or `:PORT` (all interfaces)."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ListenAddressError(f"--listen {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    port = int(port_text)
    if not 0 < port < 65536:
        raise ListenAddressError(f"--listen {value!r}: port must be 1-65535")
    host = host.strip("[]") or "0.0.0.0"
    return host, port


@dataclass(frozen=True)
class CircusLayout:
    endpoints: Endpoints
    config_path: Path | None
    listen_host: str
    listen_port: int
    python: str
    proxy_processes: int = 1
    # How long circusd lets the daemon run cmdStop for every model on shutdown before SIGKILL.
    daemon_graceful_timeout: float = 30.0
    # `swapd run --watch-config`: the daemon reloads the config file when it changes.
    watch_config: bool = False
    # How long requests in flight may run when swapd stops (`swapd run --shutdown-grace`).
    shutdown_grace: float = DEFAULT_GRACE
    # `swapd run --config-dir`: its files merged after `config_path` (None: no file, only these).
    config_dir: Path | None = None
    # `swapd run --tls-cert-file/--tls-key-file`: the proxy serves HTTPS with them.
    tls: tuple[Path, Path] | None = None


def _value(text: str) -> str:
    if "\n" in text or "\r" in text:
        raise ValueError(f"circus config values cannot span lines: {text!r}")
    return text


def render(layout: CircusLayout) -> str:
    ep = layout.endpoints
    run_dir = str(ep.run_dir)
    family = "AF_INET6" if ":" in layout.listen_host else "AF_INET"
    daemon_cmd = shlex.join(
        [
            layout.python,
            "-m",
            "swapd.daemon.main",
            "--run-dir",
            run_dir,
            *(["--config", str(layout.config_path)] if layout.config_path is not None else []),
            *(["--config-dir", str(layout.config_dir)] if layout.config_dir is not None else []),
            "--shutdown-grace",
            f"{layout.shutdown_grace:g}",
            *(["--watch-config"] if layout.watch_config else []),
        ]
    )
    # circus replaces `$(circus.sockets.swapd)` with the inherited fd; shlex.join would quote it.
    proxy_argv = [layout.python, "-m", "swapd.proxy", "--run-dir", run_dir]
    proxy_argv += ["--shutdown-grace", f"{layout.shutdown_grace:g}"]
    if layout.tls is not None:
        proxy_argv += ["--tls-cert-file", str(layout.tls[0]), "--tls-key-file", str(layout.tls[1])]
    proxy_cmd = shlex.join(proxy_argv) + f" --fd $(circus.sockets.{LISTEN_SOCKET})"
    lines = [
        "; written by `swapd run`; regenerated on every start, do not edit",
        "[circus]",
        f"endpoint = {_value(ep.circus_ctl)}",
        f"pubsub_endpoint = {_value(ep.circus_pub)}",
        # Empty disables the UDP 0.0.0.0:12027 discovery responder circus binds by default.
        "multicast_endpoint =",
        "check_delay = 1",
        "statsd = False",
        "warmup_delay = 0",
        "",
        f"[socket:{LISTEN_SOCKET}]",
        f"host = {_value(layout.listen_host)}",
        f"port = {layout.listen_port}",
        f"family = {family}",
        "",
        f"[watcher:{DAEMON_WATCHER}]",
        f"cmd = {_value(daemon_cmd)}",
        "numprocesses = 1",
        "singleton = True",
        # NOTIFY_SOCKET / WATCHDOG_USEC from systemd and SWAPD_PYTHON reach the daemon this way.
        "copy_env = True",
        "priority = 10",
        f"graceful_timeout = {layout.daemon_graceful_timeout:g}",
        "",
        f"[env:{DAEMON_WATCHER}]",
        "PYTHONUNBUFFERED = 1",
        f"SWAPD_PYTHON = {_value(layout.python)}",
        f"SWAPD_LISTEN = {_value(layout.listen_host)}:{layout.listen_port}",
        "",
        f"[watcher:{PROXY_WATCHER}]",
        f"cmd = {_value(proxy_cmd)}",
        f"numprocesses = {layout.proxy_processes}",
        "use_sockets = True",
        "copy_env = True",
        "priority = 5",
        # The proxy lets requests in flight run for the grace, then ends them and exits.
        f"graceful_timeout = {layout.shutdown_grace + PROXY_EXIT_MARGIN:g}",
        "",
        f"[env:{PROXY_WATCHER}]",
        "PYTHONUNBUFFERED = 1",
        f"SWAPD_PROXY_PROCESSES = {layout.proxy_processes}",
        "",
    ]
    return "\n".join(lines)


def write(layout: CircusLayout) -> Path:
    path = layout.endpoints.circus_ini
    tmp = path.with_suffix(".ini.tmp")
    tmp.write_text(render(layout))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path


def address_family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
