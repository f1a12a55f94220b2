"""A config with every key of llama-swap's reference loads, and warns only about the keys that
docs/configuration.md lists as accepted but ignored (each with its reason)."""

from __future__ import annotations

from pathlib import Path

import pytest

from swapd.daemon.config import load
from tests.support.paths import CONFIGS, REPO

DOCS = REPO / "docs" / "configuration.md"


def _documented() -> str:
    text = DOCS.read_text()
    start = text.index("## llama-swap keys swapd accepts but ignores")
    return text[start : text.index("\n## ", start + 1)]


def test_every_key_loads_with_only_documented_warnings() -> None:
    loaded = load(CONFIGS / "llama_swap_every_key.yaml", environ={})
    paths = {w.path for w in loaded.warnings}
    assert paths == {"logRequests"}
    documented = _documented()
    for path in paths:
        parts = path.split(".")
        if parts[0] in ("models", "peers") and len(parts) > 2:
            parts[1] = "<id>"
        general = ".".join(parts)
        assert f"`{general}`" in documented or f"`{parts[-1]}`" in documented, path
    config = loaded.config
    assert config.models["small"].aliases == ("tiny", "small:high")
    assert config.priority == {"big": 10} and config.router == "group"
    assert config.profiles["quick"].pins == {"chat": "small", "big": ""}
    assert config.selectors["chat-any"].targets == ("small", "big")
    overflow = config.selectors["overflow"]
    assert (overflow.strategy, overflow.spillover, overflow.unlisted) == ("spillover", 2, True)
    assert config.models["big"].filters.strip_params == ("seed",)
    assert config.models["small"].timeouts.connect == 30
    assert config.peers["remote"].timeouts.connect == 10
    assert config.log_time_format == "rfc3339"
    # `ui` and `performance` are swapd's too (issue 25): the web UI's session header, the sampler.
    assert config.session_headers == ("X-Session-ID",)
    assert (config.performance_disabled, config.performance_every) == (False, 5.0)


LEGACY = """
models:
  a:
    cmd: srv --port ${PORT}
  b:
    cmd: srv --port ${PORT}
"""


@pytest.mark.parametrize(
    "routing",
    [
        "groups:\n  g: {swap: false, exclusive: true, persistent: false, members: [a, b]}\n",
        "matrix:\n  vars: {x: a}\n  evict_costs: {x: 2}\n  sets:\n    both: x & b\n",
    ],
)
def test_the_legacy_top_level_forms_load_without_warnings(tmp_path: Path, routing: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(LEGACY + routing)
    loaded = load(path, environ={})
    assert loaded.warnings == ()
    assert loaded.config.router == ("matrix" if routing.startswith("matrix") else "group")
