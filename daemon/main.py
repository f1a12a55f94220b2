"""The daemon process (`python -m swapd.daemon.main --run-dir DIR --config FILE`), run by circusd
as the `swapd-daemon` watcher.

It owns the config and every model's lifecycle (`supervisor.Daemon`). Proxies and the `swapd` CLI
talk to it over a ROUTER (requests and casts) and listen on a PUB (routing table, state changes,
drains); both are `ipc://` files in the run directory, created 0600 (`endpoint.py`). It drives
circusd over circusd's control socket and learns about model exits from circusd's PUB and from
pidfds.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from ..ipc import log_time
from .config import ConfigSources, load_config
from .policy.shutdown import DEFAULT_GRACE
from .supervisor import Daemon

log = logging.getLogger("swapd.daemon")

# A daemon that cannot start (its config file became invalid) exits after this long.
RETRY_DELAY = 5.0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m swapd.daemon.main", description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--config-dir", type=Path, default=None)
    parser.add_argument("--log-level", default=os.environ.get("SWAPD_LOG_LEVEL", "INFO"))
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=DEFAULT_GRACE,
        help="when swapd stops, how long requests in flight may run before models are stopped",
    )
    parser.add_argument(
        "--watch-config",
        action="store_true",
        help="reload the config file when it changes (as `swapd reload` does)",
    )
    return parser.parse_args(argv)


async def _main(args: argparse.Namespace) -> int:
    sources = ConfigSources(args.config, args.config_dir)
    try:
        config = await asyncio.to_thread(load_config, sources)
        log_time.restamp(config.log_time_format)
        daemon = Daemon(
            args.run_dir,
            sources,
            config,
            shutdown_grace=max(0.0, args.shutdown_grace),
            watch_config=args.watch_config,
        )
    except Exception as exc:
        # `swapd run` checked the file, so it changed since (edited without `swapd reload`).
        # circusd restarts the daemon when it exits: do not turn that into a busy loop.
        log.error("cannot start with %s:\n%s\n(retrying in %gs)", sources, exc, RETRY_DELAY)
        await asyncio.sleep(RETRY_DELAY)
        return 1
    try:
        await daemon.run()
    finally:
        await daemon.lifecycle.close()
        daemon.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s swapd-daemon[%(process)d] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(main())
