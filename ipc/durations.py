"""Go's duration syntax (`time.ParseDuration`), which llama-swap's config and Ollama's
`keep_alive` both use: "5s", "1m30s", "1.5h", "-2m", "0"."""

from __future__ import annotations

import re

# The longest Go duration, in seconds: `time.Duration` is int64 nanoseconds (some 292 years).
# Ollama's `keep_alive` is one, so nothing longer can be asked for.
MAX_DURATION_S = (2**63 - 1) / 1e9

_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def go_duration(text: str) -> float | None:
    """Seconds of a Go duration string, None when it is not one."""
    text = text.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    if not body:
        return None
    total, end = 0.0, 0
    for match in _PART.finditer(body):
        if match.start() != end:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        end = match.end()
    return sign * total if end == len(body) else None
