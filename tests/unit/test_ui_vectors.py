"""The Playground's embeddings view (proxy/ui/static/playground_tools.js) renders whatever a
server's vector holds (issue 40, item 10: a non-number threw, and the view showed nothing): its
`vectorSummary`, run with node where the machine has it (the browser tests run the view itself)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import swapd.proxy.ui

STATIC = Path(swapd.proxy.ui.__file__).parent / "static"
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


def summaries(*vectors: object) -> list[dict[str, object]]:
    script = (
        f"import {{ vectorSummary }} from {json.dumps((STATIC / 'playground_tools.js').as_uri())};"
        f"console.log(JSON.stringify({json.dumps(vectors)}.map(vectorSummary)));"
    )
    assert NODE is not None
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: list[dict[str, object]] = json.loads(done.stdout)
    return result


def test_a_vector_of_numbers_shows_its_size_norm_and_first_values() -> None:
    [short, long] = summaries([3, 4], [1] * 8)
    assert short == {"dims": 2, "norm": "5.0000", "head": "3.0000, 4.0000"}
    assert long["dims"] == 8 and str(long["head"]).endswith(", …")


def test_a_vector_with_what_is_not_a_number_is_shown_not_thrown_on() -> None:
    shown = summaries([0.5, None, "x", [1], {"a": 1}, True], None, "vector", {"0": 1})
    assert shown[0] == {"dims": 6, "norm": "\u2013", "head": "0.5000, ?, ?, ?, ?, ?"}
    assert all(s == {"dims": 0, "norm": "0.0000", "head": ""} for s in shown[1:])
