"""The `swapd` command line. Each sub-command lives in its own module; this file only parses."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ...ipc.build_info import build_info
from ...ipc.endpoints import default_run_dir

# `swapd run --watch-config` by environment, for the systemd unit (`Environment=` in a drop-in).
WATCH_CONFIG_ENV = "SWAPD_WATCH_CONFIG"
# llama-swap's flags (Go's flag package: one dash or two, `-name value` or `-name=value`), taken
# as the same `swapd run` options; `-version` is swapd's `--version`.
LLAMA_SWAP_RUN_FLAGS = frozenset(
    {"config", "config-dir", "listen", "tls-cert-file", "tls-key-file", "watch-config"}
)
_LLAMA_SWAP_FLAGS = LLAMA_SWAP_RUN_FLAGS | {"version"}
_GO_TRUE = ("", "1", "t", "true", "TRUE", "True")


def llama_swap_argv(argv: list[str]) -> list[str]:
    """llama-swap's command line as swapd's: `llama-swap -config FILE -listen :8080` is
    `swapd run --config FILE --listen :8080` (without a sub-command, its flags mean `run`)."""
    out: list[str] = []
    for arg in argv:
        dashes = len(arg) - len(arg.lstrip("-"))
        name, eq, value = arg.lstrip("-").partition("=")
        if dashes in (1, 2) and name in _LLAMA_SWAP_FLAGS:
            if name == "watch-config" and eq:
                if value in _GO_TRUE:
                    out.append("--watch-config")
                continue  # Go's `-watch-config=false`: the default
            arg = f"--{name}{eq}{value}"
        out.append(arg)
    first = out[0].lstrip("-").partition("=")[0] if out and out[0].startswith("--") else ""
    if first in LLAMA_SWAP_RUN_FLAGS:
        out.insert(0, "run")
    return out


def version_line() -> str:
    """llama-swap's `-version` line: `version: X (commit), built at DATE` (what
    `GET /api/version` answers, `ipc/build_info.py`)."""
    info = build_info()
    return f"version: {info['version']} ({info['commit']}), built at {info['build_date']}"


def _add_run_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help=f"directory of swapd's private sockets (default: {default_run_dir()})",
    )


def _add_config_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="directory of *.yml/*.yaml config files merged after -c, in sorted order "
        "(llama-swap's -config-dir)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swapd",
        description="swapd runs many local inference servers behind one port and swaps them in and "
        "out of the GPUs on demand. It reads llama-swap's YAML config format, and takes "
        "llama-swap's flags (-config FILE -listen :8080 ...) as `swapd run`'s options.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=version_line(),
        help="print swapd's version (as llama-swap's -version) and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = sub.add_parser(
        "run",
        help="run swapd in the foreground (circusd with the daemon and proxy watchers)",
        description="Write the circus config into the run directory and become circusd in the "
        "foreground. Without -c or --config-dir, serve the embedded demo config. Ctrl-C or "
        "SIGTERM stops every model and exits 0.",
    )
    run.add_argument("-c", "--config", type=Path, help="llama-swap style YAML config file")
    _add_config_dir(run)
    run.add_argument(
        "--listen",
        default=None,
        help="HOST:PORT of the proxy, :PORT for every interface (default 127.0.0.1:8080, or "
        "127.0.0.1:8443 with TLS)",
    )
    run.add_argument(
        "--tls-cert-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="serve HTTPS with this certificate (PEM, its chain after it); with --tls-key-file",
    )
    run.add_argument(
        "--tls-key-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="the certificate's private key (PEM); with --tls-cert-file",
    )
    run.add_argument(
        "--proxy-processes",
        type=int,
        default=1,
        help="number of proxy processes sharing the listen socket (default 1)",
    )
    run.add_argument(
        "--shutdown-grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on Ctrl-C or SIGTERM, how long requests in flight may run before they are ended "
        "and the models stopped (default 30)",
    )
    run.add_argument(
        "--watch-config",
        action="store_true",
        default=os.environ.get(WATCH_CONFIG_ENV, "").lower() in ("1", "true", "yes"),
        help="apply the config file whenever it changes, as `swapd reload` does (llama-swap's "
        f"-watch-config; also on when {WATCH_CONFIG_ENV}=1)",
    )
    _add_run_dir(run)

    check = sub.add_parser(
        "check-config",
        help="validate a config file",
        description="Load a config file (and/or --config-dir) the way `swapd run` does. Exit 0 "
        "if it is valid, 1 with "
        "every error (file:line key.path: message) if not. Warnings (unknown keys, llama-swap "
        "keys swapd accepts but ignores, and the like) go to stderr and do not fail the check.",
    )
    check.add_argument(
        "--strict",
        action="store_true",
        help="an unknown key is an error, not a warning (swapd run, like llama-swap, ignores it)",
    )
    check.add_argument("-c", "--config", type=Path, help="the YAML config file")
    _add_config_dir(check)
    check.add_argument(
        "--print",
        dest="print_config",
        action="store_true",
        help="print the resolved config: macros expanded, defaults filled, forced settings marked",
    )

    status = sub.add_parser(
        "status",
        help="show every model's state, pid, port, GPUs, uptime, activity and TTL",
        description="Ask the running daemon for the state of every model and GPU.",
    )
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _add_run_dir(status)

    load = sub.add_parser(
        "load",
        help="start one model now and wait until it is ready",
        description="Start MODEL (a swap when another must make room) and wait until it is "
        "ready, as its first request would; exits 1 with the reason when it fails to start.",
    )
    load.add_argument("model", help="model id or alias")
    _add_run_dir(load)

    unload = sub.add_parser(
        "unload",
        help="stop one model, or every model",
        description="Stop MODEL (or every model when none is named) and wait until it has stopped.",
    )
    unload.add_argument("model", nargs="?", help="model id or alias (default: all)")
    unload.add_argument(
        "--now",
        action="store_true",
        help="a quick stop: no kvCache save of the model's conversation caches first",
    )
    _add_run_dir(unload)

    sleep = sub.add_parser(
        "sleep",
        help="put one model to sleep: its process stays, its GPU memory is given back",
        description="Put MODEL to sleep through its server's own calls (its `sleep` setting) and "
        "wait until its GPU memory came back; its next request wakes it. Exits 1 with the reason "
        "when MODEL has no sleep setting or is not running; a sleep that fails stops it.",
    )
    sleep.add_argument("model", help="model id or alias")
    _add_run_dir(sleep)

    reload = sub.add_parser(
        "reload",
        help="re-read the config file without restarting anything that did not change",
        description="Ask the daemon to re-read its config file. Models whose definition did not "
        "change stay loaded; an invalid file is rejected and the old config stays.",
    )
    _add_run_dir(reload)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(llama_swap_argv(sys.argv[1:] if argv is None else argv))
    if args.command == "check-config":
        from ..config import check_config as command
    elif args.command == "run":
        from .run import main as command
    else:
        from .operator import main as command
    return command(args)


if __name__ == "__main__":
    sys.exit(main())
