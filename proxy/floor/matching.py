"""Path patterns (`upstream.ignorePaths`, ComfyUI's fixed ones), compiled once and matched in
linear time.

`re.search` with a pattern that starts with `.*` tries that `.*` from every position of the path:
quadratic in its length. Such a leading `.*` changes nothing about whether the rest matches
somewhere (a match of `.*R` starting at i exists exactly when `R` matches at some j >= i), so it is
dropped before compiling. What the pattern means is unchanged; a user pattern with nested
quantifiers is still the user's (`swapd check-config` warns about those).
"""

from __future__ import annotations

import logging
import re

from ...ipc.path_patterns import search_form

log = logging.getLogger(__name__)

_NEVER = re.compile(r"(?!)")


def compile_path_pattern(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(search_form(pattern))
    except re.error:
        # The config loader validates these; a pattern Python cannot compile matches nothing
        # rather than taking the proxy down.
        log.error("path pattern %r does not compile; ignoring it", pattern)
        return _NEVER
