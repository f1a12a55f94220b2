"""The form of a path pattern that both sides search with.

The proxy runs every `upstream.ignorePaths` pattern (and ComfyUI's fixed ones) with `re.search` on
every `/upstream/` path. A leading `.*` (llama-swap's own default starts with one) matches nothing
more under `search` (a match of `.*R` starting at i exists exactly when `R` matches at some
j >= i) but makes each search quadratic in the path's length.
"""

from __future__ import annotations

import re


def search_form(pattern: str) -> str:
    """The pattern without a redundant leading `.*`: the same paths match under `re.search`."""
    if not pattern.startswith(".*") or pattern[2:3] in ("+", "*", "?", "{"):
        return pattern  # `.*?` and `.*+` are other operators: keep them as written
    shorter = pattern[2:]
    try:
        re.compile(shorter)
    except re.error:
        return pattern
    return shorter
