"""The web UI's JavaScript modules (proxy/ui/static/) run under node, for the unit tests of their
words and summaries: `evaluate` imports what a script names and returns what it prints as JSON."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import swapd.proxy.ui

STATIC = Path(swapd.proxy.ui.__file__).parent / "static"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")


def module_url(name: str) -> str:
    """A static module's URL, quoted for an `import` in a script."""
    return json.dumps((STATIC / name).as_uri())


def evaluate(script: str) -> Any:
    """Run `script` (an ES module that prints one JSON value) under node; its value."""
    assert NODE is not None
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)
