"""`logTimeFormat` (llama-swap's names for Go's time layouts): the timestamp that begins each of
swapd's own log lines, in the daemon and in the proxies. Unset: swapd's own stamp
(`2026-01-02 15:04:05,123`); an empty string: no timestamp, as llama-swap's default; one of
`NAMES`: that layout. docs/configuration.md, "logTimeFormat"."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

# Go's layouts as strftime patterns; %e is the space-padded day of Go's `_2`.
_STRFTIME = {
    "ansic": "%a %b %e %H:%M:%S %Y",
    "unixdate": "%a %b %e %H:%M:%S %Z %Y",
    "rubydate": "%a %b %d %H:%M:%S %z %Y",
    "rfc822": "%d %b %y %H:%M %Z",
    "rfc822z": "%d %b %y %H:%M %z",
    "rfc850": "%A, %d-%b-%y %H:%M:%S %Z",
    "rfc1123": "%a, %d %b %Y %H:%M:%S %Z",
    "rfc1123z": "%a, %d %b %Y %H:%M:%S %z",
    "stamp": "%b %e %H:%M:%S",
}
# Fractional digits after Go's `stamp` layouts.
_STAMP_DIGITS = {"stampmilli": 3, "stampmicro": 6, "stampnano": 9}
NAMES = (*_STRFTIME, "rfc3339", "rfc3339nano", "kitchen", *_STAMP_DIGITS)


def normalise(value: str | None) -> str | None:
    """llama-swap's reading: trimmed, case-insensitive. None: unset."""
    return None if value is None else value.strip().lower()


def _rfc3339(ns: int, nano: bool) -> str:
    moment = datetime.fromtimestamp(ns // 1_000_000_000).astimezone()
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if nano:
        fraction = f"{ns % 1_000_000_000:09d}".rstrip("0")
        text += f".{fraction}" if fraction else ""
    offset = moment.strftime("%z")
    return text + ("Z" if offset == "+0000" else f"{offset[:3]}:{offset[3:]}")


def stamper(name: str | None) -> Callable[[int], str] | None:
    """A function of `time.time_ns()` giving the stamp for `name` (an empty one for "" and for
    names llama-swap does not know either), or None for swapd's own stamp (unset)."""
    if name is None:
        return None
    if name == "":
        return lambda ns: ""
    if name in _STRFTIME:
        pattern = _STRFTIME[name]
        return lambda ns: time.strftime(pattern, time.localtime(ns // 1_000_000_000))
    if name in ("rfc3339", "rfc3339nano"):
        nano = name == "rfc3339nano"
        return lambda ns: _rfc3339(ns, nano)
    if name == "kitchen":
        return lambda ns: time.strftime("%I:%M%p", time.localtime(ns // 10**9)).lstrip("0")
    if name in _STAMP_DIGITS:
        digits = _STAMP_DIGITS[name]

        def stamp(ns: int) -> str:
            whole = time.strftime("%b %e %H:%M:%S", time.localtime(ns // 1_000_000_000))
            return f"{whole}.{ns % 1_000_000_000 // 10 ** (9 - digits):0{digits}d}"

        return stamp
    return lambda ns: ""  # unknown: no stamp, as llama-swap (the loader warns)


class Formatter(logging.Formatter):
    """A log format whose `%(asctime)s` is the `logTimeFormat` stamp; with no stamp the space
    after it goes too. `name` None: logging's own asctime."""

    def __init__(self, fmt: str, name: str | None, datefmt: str | None = None) -> None:
        self.original = fmt
        self.stamp = stamper(name)
        if self.stamp is not None and not self.stamp(0):
            fmt = fmt.replace("%(asctime)s ", "").replace("[%(asctime)s] ", "")
        super().__init__(fmt, datefmt)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if self.stamp is None:
            return super().formatTime(record, datefmt)
        return self.stamp(int(record.created * 1e9))


def restamp(name: str | None) -> None:
    """Give the root logger's handlers `name`'s stamp, each keeping the format it was given."""
    for handler in logging.getLogger().handlers:
        current = handler.formatter
        if current is None:
            continue
        fmt = getattr(current, "original", None) or current._fmt or "%(message)s"
        handler.setFormatter(Formatter(fmt, name, current.datefmt))
