"""The Playground's embeddings view (proxy/ui/static/playground_tools.js) renders whatever a
server's vector holds (issue 40, item 10: a non-number threw, and the view showed nothing): its
`vectorSummary`, run with node where the machine has it (the browser tests run the view itself)."""

from __future__ import annotations

import json

from tests.support.ui_modules import evaluate, module_url, needs_node

pytestmark = needs_node


def summaries(*vectors: object) -> list[dict[str, object]]:
    script = (
        f"import {{ vectorSummary }} from {module_url('playground_tools.js')};"
        f"console.log(JSON.stringify({json.dumps(vectors)}.map(vectorSummary)));"
    )
    result: list[dict[str, object]] = evaluate(script)
    return result


def test_a_vector_of_numbers_shows_its_size_norm_and_first_values() -> None:
    [short, long] = summaries([3, 4], [1] * 8)
    assert short == {"dims": 2, "norm": "5.0000", "head": "3.0000, 4.0000"}
    assert long["dims"] == 8 and str(long["head"]).endswith(", …")


def test_a_vector_with_what_is_not_a_number_is_shown_not_thrown_on() -> None:
    shown = summaries([0.5, None, "x", [1], {"a": 1}, True], None, "vector", {"0": 1})
    assert shown[0] == {"dims": 6, "norm": "\u2013", "head": "0.5000, ?, ?, ?, ?, ?"}
    assert all(s == {"dims": 0, "norm": "0.0000", "head": ""} for s in shown[1:])
