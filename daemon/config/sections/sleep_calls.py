"""The lists a `sleep` setting writes (sleep_fields.py reads the setting): its calls (llmsnap's
items, `endpoint`, `method`, `body`, `timeout`, or `"POST /path"`), its `wakeOn` rules
(`"METHOD /path"`), and its seconds, as `typed.py` typed them (reporting each value of the wrong
type, and each unknown key). Each reader reports its problems and returns None (seconds: False)
after an error, or where a value it reads was reported: the setting's reading stops there.
"""

from __future__ import annotations

import json
import re
from typing import TypeVar

from ....ipc.routing_table import HttpCall, WakeRule
from .. import shape
from ..floor.issues import Report, describe
from ..floor.patterns import has_nested_quantifier
from ..floor.typed import Converter
from ..floor.yaml_nodes import Path

C = TypeVar("C", bound=shape.KvCall)

# llmsnap's default for `sleepRequestTimeout` and `wakeRequestTimeout`.
DEFAULT_REQUEST_TIMEOUT = 10.0
METHODS = ("GET", "POST", "PUT", "PATCH")
# What a `wakeOn` entry may name: a request's method, or `*` for any.
WAKE_METHODS = ("*", "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def read_calls(
    value: tuple[str | shape.SleepCall, ...] | None,
    where: Path,
    report: Report,
    timeout: float | None,
) -> tuple[HttpCall, ...] | None:
    """A list of calls (llmsnap's items: `endpoint`, `method`, `body`, `timeout`; or, in a
    `sleep` mapping, a string `"POST /path"`); None after an error."""
    calls = [
        _call(item, (*where, index), report, timeout)
        for index, item in Converter(report).indexed(where, value)
    ]
    if None in calls or report.typed_wrong(where):
        return None
    return tuple(call for call in calls if call is not None)


def _call(
    item: str | shape.SleepCall, where: Path, report: Report, timeout: float | None
) -> HttpCall | None:
    item = written_out(item, shape.SleepCall)
    if report.typed_wrong((*where, "endpoint")):
        return None
    written = item.endpoint
    if written is None or not written.strip():
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
    seconds = read_seconds(item.timeout, (*where, "timeout"), report, 0.0)
    if seconds is False:
        return None
    if not seconds:  # llmsnap's 0: the default
        seconds = timeout if timeout is not None else DEFAULT_REQUEST_TIMEOUT
    return HttpCall(endpoint, method=method, body=body or "", timeout=float(seconds))


def written_out(item: str | C, kind: type[C]) -> C:
    """A call written as `"METHOD /path"`, as the mapping it stands for (`sleep`'s calls and
    `kvCache`'s); a mapping as it is."""
    if isinstance(item, str):
        method, _, endpoint = item.strip().partition(" ")
        return kind(endpoint=endpoint.strip(), method=method)
    return item


def read_method_and_body(
    item: shape.KvCall, default: str, where: Path, report: Report
) -> tuple[str, str | None] | None:
    """A written-out call's `method` (`default` when unset), upper case, and its `body` (a
    mapping or list sent as JSON; None when unset); None after an error (`typed.py` reported a
    method or a body of the wrong type). Shared by `sleep`'s calls and `kvCache`'s."""
    if report.typed_wrong((*where, "method")):
        return None
    method = item.method or default
    if method.upper() not in METHODS:
        report.error(
            (*where, "method"),
            f"invalid method {describe(method)} (must be {', '.join(METHODS)})",
        )
        return None
    if report.typed_wrong((*where, "body")):
        return None
    body = item.body if isinstance(item.body, str | None) else json.dumps(item.body)
    return method.upper(), body


def read_wake_rules(
    value: tuple[str, ...], where: Path, report: Report
) -> tuple[WakeRule, ...] | None:
    """`wakeOn`: a list of `"METHOD /path"` (`*` for any method; the path a regular expression
    matched against the whole path on the model's own server); None after an error."""
    rules: list[WakeRule] = []
    for index, item in Converter(report).indexed(where, value):
        rule = _wake_rule(item, (*where, index), report)
        if rule is None:
            return None
        rules.append(rule)
    if report.typed_wrong(where):
        return None
    if not rules:
        report.warn(where, "lists nothing: no request wakes it (only a load or a wake by hand)")
    return tuple(rules)


def _wake_rule(item: str, where: Path, report: Report) -> WakeRule | None:
    method, _, path = item.strip().partition(" ")
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


def read_seconds(
    value: float | None, where: Path, report: Report, minimum: float
) -> float | bool | None:
    """Seconds (None: unset; False after an error, `typed.py`'s for one that is no number)."""
    if report.typed_wrong(where):
        return False
    if value is None:
        return None
    if value != value:
        report.error(where, f"expected seconds (a number), got {value}")
        return False
    if value < 0 or value == float("inf"):
        report.error(where, f"must be at least 0 seconds and finite, got {value}")
        return False
    if value < minimum:
        report.warn(where, f"{value:g} is below {minimum:g}: {minimum:g} is used (llmsnap's least)")
        return minimum
    return float(value)
