"""The lists a `sleep` setting writes (sleep_fields.py reads the setting): its calls (llmsnap's
items, `endpoint`, `method`, `body`, `timeout`, or `"POST /path"`), its `wakeOn` rules
(`"METHOD /path"`), and its seconds. Each reader reports its problems and returns None (seconds:
False) after an error, so that the setting's reading stops at its first problem.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ....ipc.routing_table import HttpCall, WakeRule
from ..floor.issues import Report, describe
from ..floor.patterns import has_nested_quantifier
from ..floor.schema import known_keys
from ..floor.yaml_nodes import Path

# llmsnap's default for `sleepRequestTimeout` and `wakeRequestTimeout`.
DEFAULT_REQUEST_TIMEOUT = 10.0
METHODS = ("GET", "POST", "PUT", "PATCH")
# What a `wakeOn` entry may name: a request's method, or `*` for any.
WAKE_METHODS = ("*", "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_CALL_KEYS = ("endpoint", "method", "body", "timeout")


def read_calls(
    value: Any, where: Path, report: Report, timeout: float | None, *, llmsnap: bool = False
) -> tuple[HttpCall, ...] | None:
    """A list of calls (llmsnap's items: `endpoint`, `method`, `body`, `timeout`; or a string
    `"POST /path"`); None after an error."""
    if value is None:
        return ()
    if not isinstance(value, list):
        report.error(where, f"expected a list of calls (endpoint, ...), got {describe(value)}")
        return None
    calls = []
    for index, item in enumerate(value):
        call = _call(item, (*where, index), report, timeout, llmsnap)
        if call is not None:
            calls.append(call)
    return tuple(calls) if len(calls) == len(value) else None


def _call(
    item: Any, where: Path, report: Report, timeout: float | None, llmsnap: bool
) -> HttpCall | None:
    if isinstance(item, str) and not llmsnap:
        method, _, endpoint = item.strip().partition(" ")
        item = {"method": method, "endpoint": endpoint.strip()}
    if not isinstance(item, dict):
        shape = "a mapping with endpoint" + ("" if llmsnap else ", or 'METHOD /path'")
        report.error(where, f"expected {shape}, got {describe(item)}")
        return None
    if not known_keys(item, _CALL_KEYS, where, report):
        return None
    written = item.get("endpoint")
    if not isinstance(written, str) or not written.strip():
        report.error(where, "endpoint path is required", key=True)
        return None
    endpoint = written.strip()
    if "://" in endpoint:
        report.error(
            (*where, "endpoint"),
            f"expected a path on the model's own server (its proxy URL), got {endpoint!r}",
        )
        return None
    if not endpoint.startswith("/"):
        report.warn(
            (*where, "endpoint"),
            f"expected a path starting with '/', got {endpoint!r}: sent as '/{endpoint}'",
        )
        endpoint = "/" + endpoint
    read = read_method_and_body(item, "POST", where, report)
    if read is None:
        return None
    method, body = read
    seconds = read_seconds(item.get("timeout"), (*where, "timeout"), report, 0.0)
    if seconds is False:
        return None
    if not seconds:  # llmsnap's 0: the default
        seconds = timeout if timeout is not None else DEFAULT_REQUEST_TIMEOUT
    return HttpCall(endpoint, method=method, body=body or "", timeout=float(seconds))


def read_method_and_body(
    item: Mapping[str, Any], default: str, where: Path, report: Report
) -> tuple[str, str | None] | None:
    """A written-out call's `method` (`default` when unset), upper case, and its `body` (a
    mapping or list sent as JSON; None when unset); None after an error. Shared by `sleep`'s
    calls and `kvCache`'s."""
    method = item.get("method") or default
    if not isinstance(method, str) or method.upper() not in METHODS:
        report.error(
            (*where, "method"),
            f"invalid method {describe(method)} (must be {', '.join(METHODS)})",
        )
        return None
    body = item.get("body")
    if isinstance(body, dict | list):
        body = json.dumps(body)
    elif body is not None and not isinstance(body, str):
        report.error((*where, "body"), f"expected the request body as text, got {describe(body)}")
        return None
    return method.upper(), body


def read_wake_rules(value: Any, where: Path, report: Report) -> tuple[WakeRule, ...] | None:
    """`wakeOn`: a list of `"METHOD /path"` (`*` for any method; the path a regular expression
    matched against the whole path on the model's own server); None after an error."""
    if not isinstance(value, list):
        report.error(where, f"expected a list of 'METHOD /path' patterns, got {describe(value)}")
        return None
    rules: list[WakeRule] = []
    for index, item in enumerate(value):
        rule = _wake_rule(item, (*where, index), report)
        if rule is None:
            return None
        rules.append(rule)
    if not rules:
        report.warn(where, "lists nothing: no request wakes it (only a load or a wake by hand)")
    return tuple(rules)


def _wake_rule(item: Any, where: Path, report: Report) -> WakeRule | None:
    method, _, path = item.strip().partition(" ") if isinstance(item, str) else ("", "", "")
    path = path.strip()
    if not method or not path:
        report.error(
            where, f"expected 'METHOD /path' (e.g. 'POST /api/prompt'), got {describe(item)}"
        )
        return None
    if method.upper() not in WAKE_METHODS:
        report.error(where, f"invalid method {method!r} (must be {', '.join(WAKE_METHODS)})")
        return None
    if not path.startswith("/"):
        report.error(where, f"expected a path starting with '/', got {path!r}")
        return None
    try:
        re.compile(path)
    except re.error as exc:
        report.error(where, f"invalid regular expression {path!r}: {exc}")
        return None
    if has_nested_quantifier(path):
        report.warn(
            where,
            f"pattern {path!r} repeats a group that itself repeats (nested quantifiers, as in "
            "(a+)+$): on a path that almost matches it can take exponential time, and it runs "
            "on every request to the asleep model",
        )
    return WakeRule(method.upper(), path)


def read_seconds(value: Any, where: Path, report: Report, minimum: float) -> float | bool | None:
    """Seconds (None: unset; False after an error)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        report.error(where, f"expected seconds (a number), got {describe(value)}")
        return False
    if value < 0 or value == float("inf"):
        report.error(where, f"must be at least 0 seconds and finite, got {value}")
        return False
    if value < minimum:
        report.warn(where, f"{value:g} is below {minimum:g}: {minimum:g} is used (llmsnap's least)")
        return minimum
    return float(value)
