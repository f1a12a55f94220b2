"""Model id <-> circus watcher name.

circus publishes events on topics `watcher.<name>.<event>` and looks watchers up case-insensitively,
while model ids may hold `/ : .` and upper case. So a watcher name keeps only `[a-z0-9-]` and
writes every other byte of the UTF-8 id as `_xx` (lower-case hex). The mapping is reversible and
two different ids never share a name, even when circus lower-cases it.
"""

from __future__ import annotations

import re

# The two static watchers of the circus config (`daemon/cli/circus_config.py` writes them; the
# daemon process names the proxy's when it decides whether swapd as a whole is stopping).
DAEMON_WATCHER = "swapd-daemon"
PROXY_WATCHER = "swapd-proxy"

PREFIX = "model-"
_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-")
_ESCAPE = re.compile(r"_([0-9a-f]{2})")


def watcher_name(model_id: str) -> str:
    if not model_id:
        raise ValueError("a model id cannot be empty")
    out: list[str] = []
    for byte in model_id.encode():
        out.append(chr(byte) if byte in _SAFE else f"_{byte:02x}")
    return PREFIX + "".join(out)


def is_model_watcher(name: str) -> bool:
    return name.lower().startswith(PREFIX)


def model_id(name: str) -> str:
    """The model id a watcher name stands for; ValueError for a name `watcher_name` cannot make."""
    if not is_model_watcher(name):
        raise ValueError(f"{name!r} is not a model watcher name")
    body = name[len(PREFIX) :].lower()
    raw = bytearray()
    pos = 0
    while pos < len(body):
        char = body[pos]
        if char == "_":
            match = _ESCAPE.match(body, pos)
            if match is None:
                raise ValueError(f"bad escape in watcher name {name!r}")
            raw.append(int(match.group(1), 16))
            pos = match.end()
        elif ord(char) in _SAFE:
            raw.append(ord(char))
            pos += 1
        else:
            raise ValueError(f"unexpected character {char!r} in watcher name {name!r}")
    decoded = raw.decode()
    if watcher_name(decoded) != PREFIX + body:
        raise ValueError(f"{name!r} is not in canonical form")
    return decoded


def model_log_name(model_id: str) -> str:
    """The file (in the run directory's `logs/`) that holds a model's output: written by circus
    for the daemon, read by the proxy's `/logs` endpoints."""
    return watcher_name(model_id) + ".log"
