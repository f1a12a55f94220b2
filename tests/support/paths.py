"""Where things are, for every test tier: the repository, the test data, the fake upstreams."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
CONFIGS = DATA / "configs"
BUSY_ANSWERS = DATA / "busy_answers"
UPSTREAMS = REPO / "tests" / "support" / "upstreams"
# The read-only shared folder beside the project's root (its seed pages), where there is one.
SHARED = REPO.parent / "shared"
