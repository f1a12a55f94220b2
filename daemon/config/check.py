"""`swapd check-config`: load a config the way `swapd run` does and say whether it is usable."""

from __future__ import annotations

import argparse
import os
import sys

from .loader import ConfigError, load
from .render import render
from .sources import ConfigSources


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


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
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    config = loaded.config
    summary = [_plural(len(config.models), "model")]
    if config.groups:
        summary.append(_plural(len(config.groups), "group"))
    if config.peers:
        summary.append(_plural(len(config.peers), "peer"))
    if loaded.warnings:
        summary.append(_plural(len(loaded.warnings), "warning"))
    if args.print_config:
        print(f"# {sources}: resolved by swapd (macros expanded, defaults filled)")
        print(render(config), end="")
    print(f"OK: {', '.join(summary)}", file=sys.stderr if args.print_config else sys.stdout)
    return 0
