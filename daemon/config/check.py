"""`swapd check-config`: load a config the way `swapd run` does and say whether it is usable."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from ...ipc.routing_table import SleepMethod
from .loader import ConfigError, load
from .model import Config
from .render import render
from .sources import ConfigSources


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _cuda_warnings(config: Config, environ: Mapping[str, str]) -> list[str]:
    """`sleep: cuda` where the driver's checkpoint API cannot be used: those models are stopped,
    never put to sleep (the daemon logs why at each swap)."""
    ids = [m.id for m in config.models.values() if m.sleep and m.sleep.method is SleepMethod.CUDA]
    if not ids:
        return []
    # Only here: the machinery is no part of reading a config.
    from ..machinery.cuda_backend import Unavailable
    from ..machinery.cuda_choice import make_checkpointer

    backend = make_checkpointer(environ)
    if not isinstance(backend, Unavailable):
        return []
    return [
        f"models.{model_id}.sleep: cuda cannot be used on this host ({backend.reason}): "
        "a swap stops it instead"
        for model_id in ids
    ]


def main(args: argparse.Namespace) -> int:
    # `swapd run` exports SWAPD_PYTHON (its own interpreter) before it loads the config.
    environ = {**os.environ, "SWAPD_PYTHON": sys.executable}
    sources = ConfigSources(args.config, getattr(args, "config_dir", None))
    if sources.file is None and sources.directory is None:
        print("swapd check-config: give -c FILE, --config-dir DIR, or both", file=sys.stderr)
        return 2
    try:
        loaded = load(sources, environ=environ, strict=getattr(args, "strict", False))
    except ConfigError as error:
        for warning in error.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        for issue in error.issues:
            print(issue, file=sys.stderr)
        count = len(error.issues)
        print(f"{sources}: {_plural(count, 'error')}, config not usable", file=sys.stderr)
        return 1
    config = loaded.config
    notes: list[object] = [*loaded.warnings, *_cuda_warnings(config, environ)]
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    summary = [_plural(len(config.models), "model")]
    if config.groups:
        summary.append(_plural(len(config.groups), "group"))
    if config.peers:
        summary.append(_plural(len(config.peers), "peer"))
    if notes:
        summary.append(_plural(len(notes), "warning"))
    if args.print_config:
        print(f"# {sources}: resolved by swapd (macros expanded, defaults filled)")
        print(render(config), end="")
    print(f"OK: {', '.join(summary)}", file=sys.stderr if args.print_config else sys.stdout)
    return 0
