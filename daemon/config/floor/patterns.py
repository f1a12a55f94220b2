"""`upstream.ignorePaths` patterns: the form the proxy searches with, and the ones to warn about.

The proxy runs every pattern with `re.search` on every `/upstream/` path, so a pattern's cost is
paid per request. A leading `.*` (llama-swap's own default starts with one) matches nothing more
under `search` but makes each search quadratic in the path's length: the routing table carries
the pattern without it. A repeated group that itself repeats (`(a+)+$`) can backtrack
exponentially on a path that almost matches: `check-config` warns about it.
"""

from __future__ import annotations

import importlib
from typing import Any

# The parser `re` itself uses; private (and without types), so a Python without it just gets no
# warning.
sre_parser: Any
sre_constants: Any
try:
    sre_constants = importlib.import_module("re._constants")
    sre_parser = importlib.import_module("re._parser")
except ImportError:  # pragma: no cover - Python < 3.11
    sre_parser = None

NESTED_QUANTIFIER_WARNING = (
    "pattern {pattern!r} repeats a group that itself repeats (nested quantifiers, as in "
    "(a+)+$): on a path that almost matches it can take exponential time, and it runs on every "
    "/upstream/ request path"
)


def has_nested_quantifier(pattern: str) -> bool:
    """Whether an unbounded repeat (`+`, `*`, `{n,}`) holds another repeat (`+`, `*`, `{n,m}`
    with m > 1): the shape whose ways to split a path grow exponentially with its length."""
    if sre_parser is None:
        return False
    try:
        parsed = sre_parser.parse(pattern)
    except Exception:  # an invalid pattern is reported on its own; nothing to warn about here
        return False
    return _nested(list(parsed), inside_repeat=False)


_REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT) if sre_parser else ()


def _nested(items: list[tuple[Any, Any]], *, inside_repeat: bool) -> bool:
    for op, av in items:
        if op in _REPEATS:
            _low, high, body = av
            if high > 1 and inside_repeat:
                return True
            unbounded = high == sre_constants.MAXREPEAT
            if _nested(list(body), inside_repeat=inside_repeat or unbounded):
                return True
        elif op is sre_constants.SUBPATTERN:
            if _nested(list(av[3]), inside_repeat=inside_repeat):
                return True
        elif op is sre_constants.BRANCH:
            if any(_nested(list(branch), inside_repeat=inside_repeat) for branch in av[1]):
                return True
        # Atomic groups and possessive repeats never backtrack into their body: not flagged.
    return False
